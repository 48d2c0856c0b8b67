"""The sentence-transformers module files of a saved model: moved to :mod:`spladekit.model.st_modules`
(:meth:`spladekit.model.encoder.SpladeEncoder.save_pretrained` writes them, and the model stage may not
import training); this old import path stays."""

from spladekit.model.st_modules import (MODULES, ROUTER_TYPES, write_inference_free_sentence_transformers_files,  # noqa: F401
                                        write_sentence_transformers_files)
