"""The measuring tools of attention_lib.memory (notebook 07): the largest buffer, and the peak of one call."""

import subprocess
import sys

import pytest
import torch

import attention_lib.tools.memory as memory
from attention_lib.tools.memory import LargestBuffer, can_measure_peak, peak_mib

LINUX_PEAK = pytest.mark.skipif(not can_measure_peak(), reason="peak memory needs Linux with glibc and clear_refs")


def test_largest_buffer_sees_new_memory_and_not_views():
    x = torch.randn(300, 200)
    with LargestBuffer() as largest:
        y = x @ x.T  # (300, 300): new memory
        x[:100].t().contiguous()  # (200, 100): new, smaller
        y.view(-1)  # a view: no new memory
    assert largest.shape == (300, 300) and largest.nbytes == 300 * 300 * 4


def test_largest_buffer_sees_the_backward():
    w = torch.randn(64, 1000, requires_grad=True)
    with LargestBuffer() as largest:
        (w @ w.T).sum().backward()  # the gradient of w, (64, 1000), is the largest buffer
    assert largest.nbytes == 64 * 1000 * 4


@LINUX_PEAK
def test_peak_counts_what_the_call_holds_at_once_and_not_more():
    def hold_64_mib_then_free():
        a = torch.ones(16 * 2**20)  # 64 MiB, written: resident
        b = a + 1  # another 64 MiB while a is alive
        del a, b

    peak = peak_mib(hold_64_mib_then_free)
    assert 120 < peak < 160, peak  # both tensors at once, a little bookkeeping
    assert peak_mib(lambda: None) < 8


@LINUX_PEAK
def test_memory_freed_inside_the_call_is_not_counted_twice():
    # In a process of its own: after a long test session glibc can serve the second 64 MiB from a free chunk of the
    # heap whose pages it trimmed, instead of a fresh mapping (a CI run read 128 three times in a row). A fresh process
    # is the state the tool promises to measure in; what the heap of a long session does is not the tool's to undo.
    code = """
import torch
from attention_lib.tools.memory import peak_mib

def two_in_turn():
    for _ in range(2):
        a = torch.ones(16 * 2**20)  # 64 MiB, freed before the next one
        del a

print(peak_mib(two_in_turn))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert 56 < float(out.stdout) < 90, out.stdout


def test_without_linux_peak_mib_returns_none_and_does_not_call(monkeypatch):
    monkeypatch.setattr(memory, "_LIBC", None)  # as on macOS, Windows or musl
    called = []
    assert not memory.can_measure_peak()
    assert peak_mib(lambda: called.append(1)) is None and called == []
