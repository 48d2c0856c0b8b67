"""Stages 2-4: tokens → hidden states → MLM-head logits → SPLADE vectors."""

from spladekit.model.encoder import EncoderMetadata, SpladeEncoder, weights_to_csr
from spladekit.model.folders import ModelFolder, read_model_folder
from spladekit.model.fused import fused_splade_head
from spladekit.model.fused_sum import fused_sum_splade_head
from spladekit.model.heads import MLMHead, find_mlm_head
from spladekit.model.pooling import plain_splade_head, splade_activation, splade_max_pool, splade_pool
from spladekit.model.splade import SpladeModel

__all__ = [
    "EncoderMetadata",
    "SpladeEncoder",
    "weights_to_csr",
    "MLMHead",
    "find_mlm_head",
    "plain_splade_head",
    "fused_splade_head",
    "fused_sum_splade_head",
    "ModelFolder",
    "read_model_folder",
    "splade_pool",
    "splade_activation",
    "splade_max_pool",
    "SpladeModel",
]
