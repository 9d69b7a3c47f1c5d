"""The inference engine: GGUF loading, quant formats, tokenizer, reference model, CUDA backend, scheduler and server."""
