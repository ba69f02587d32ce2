"""Grammar front ends: constraints written as something other than JSON Schema.

:mod:`~jsonmode.decoding.grammars.compiled` is the entry point
(:func:`~jsonmode.decoding.grammars.compiled.compile_grammar`, the compiled
grammar, regular expressions and choices); :mod:`~jsonmode.decoding.grammars.gbnf`
reads llama.cpp's GBNF; :mod:`~jsonmode.decoding.grammars.builtins` holds the
built-in grammars (JSON Lines, CSV). Each front end writes the same
:class:`~jsonmode.decoding.ir.Grammar` the schema compiler writes. A new grammar
syntax goes here.
"""
