"""The constrained-decoding engine: vocabulary, schema compiler, matcher.

It knows nothing of backends: a backend hands it a tokenizer and a logits row.
"""
