"""Schema → grammar IR: the first stage of the decoder.

:mod:`~jsonmode.decoding.compile.compiler` walks a normalised JSON Schema and writes
the rules of a :class:`~jsonmode.decoding.ir.Grammar`; beside it, one module per
family of keywords: objects and arrays (``containers``), number bounds (``numbers``),
``allOf`` (``merging``, ``inlining``), ``not`` (``negation``), keyword rewrites
(``lowering``), ``$dynamicRef`` scope (``scope``) and ``format`` patterns
(``format_patterns``, with its generated ``format_tables``). A new keyword goes here.
Nothing here knows of tokens or vocabularies.
"""
