"""A stand-in for Colab's `google.colab` package, for the Colab-like test (tests/test_colab.py).

Colab imports `google.colab` when its kernel starts, so `"google.colab" in sys.modules` tells a notebook that it
runs in Colab. Only `output.enable_custom_widget_manager` is provided; it records each call.
"""

from google.colab import output

__all__ = ["output"]
