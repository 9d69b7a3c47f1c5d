"""`openjet setup`: hardware checks, model download, kernel compile and self-test, or the llama-server fallback."""
