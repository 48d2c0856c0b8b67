"""spladekit's version (``pyproject.toml``'s ``version``), in a module below every stage: a module that
records or serves it reads it here, not from the package's facade (``spladekit/__init__``), which
re-exports from every stage."""

__version__ = "0.1.0"
