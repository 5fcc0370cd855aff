"""An SGLang prefill/decode deployment simulator whose paged KV pool really leaks."""
