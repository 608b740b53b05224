"""Measuring tools of notebook 07 and the benchmarks, apart from the attention library: `import attention_lib` does
not load them. `tools.memory`: the largest buffer of a computation, and the peak memory of a call."""
