"""lazyrt's version, written once: ``lazyrt.__version__``, the C kernel cache's
folder and ``setup.py`` (which reads this file as text, not importing lazyrt) use it."""
__version__ = "0.1.0"
