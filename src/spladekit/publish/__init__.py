"""Publishing a saved model: its model card (``README.md``, :mod:`spladekit.publish.card`) and the
upload of its folder to the Hugging Face hub (:mod:`spladekit.publish.push`).

Both read the files of a model folder only (no model is loaded, nothing imports torch), so they run
last in the data flow and import no earlier stage's code.
"""
