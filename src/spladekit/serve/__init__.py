"""``spladekit serve``: an index behind HTTP with its query encoder inside (FastAPI + uvicorn).

:mod:`spladekit.serve.app` (endpoints, status codes, the application of one worker),
:mod:`spladekit.serve.service` (the index, query encoder and batch function of one worker),
:mod:`spladekit.serve.config` (the server's settings), :mod:`spladekit.serve.limits` (connection and body limits),
:mod:`spladekit.serve.connection` (the HTTP connection guard: uvicorn's protocol with bounds on a request's head),
:mod:`spladekit.serve.batching` (micro-batching, the bounded queue),
:mod:`spladekit.serve.schemas` (request and response models, the rules a request must follow),
:mod:`spladekit.serve.workers` (several worker processes, each on its own ``SO_REUSEPORT`` socket).
Needs the ``serve`` extra: ``pip install 'spladekit[serve]'``.
"""
