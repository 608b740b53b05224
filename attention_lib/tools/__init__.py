"""Measuring tools, apart from the attention library: `import attention_lib` does not load them.
`tools.memory`: the largest buffer of a computation, and the peak memory of one call."""
