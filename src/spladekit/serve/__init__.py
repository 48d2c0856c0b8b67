"""``spladekit serve``: an index behind HTTP with its query encoder inside (FastAPI + uvicorn).

:mod:`spladekit.serve.app` (endpoints, status codes, the service of one worker),
:mod:`spladekit.serve.batching` (micro-batching, the bounded queue),
:mod:`spladekit.serve.schemas` (request and response models, the rules a request must follow),
:mod:`spladekit.serve.workers` (several worker processes, each on its own ``SO_REUSEPORT`` socket).
Needs the ``serve`` extra: ``pip install 'spladekit[serve]'``.
"""
