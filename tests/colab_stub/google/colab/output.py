"""`google.colab.output` reduced to what the series calls. Each call of `enable_custom_widget_manager` appends a
line to the file named by COLAB_STUB_RECORD (when set) and to `calls`, so the test can tell that it happened."""

from __future__ import annotations

import os

calls: list[str] = []


def enable_custom_widget_manager() -> None:
    calls.append("enable_custom_widget_manager")
    record = os.environ.get("COLAB_STUB_RECORD")
    if record:
        with open(record, "a") as f:
            f.write("enable_custom_widget_manager\n")


def disable_custom_widget_manager() -> None:
    calls.append("disable_custom_widget_manager")
