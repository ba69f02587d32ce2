"""Grammar IR → automata: one DFA per rule, joined into a recursive transition network.

:mod:`~jsonmode.decoding.automata.network` builds the network
(:class:`~jsonmode.decoding.automata.rule_dfa.RuleDFA` per rule), with the call
graph's analyses (``rule_graph``), rule shapes for caching (``shapes``), objects'
members in any order (``objects``, ``families``), the byte automata and tries of
object keys (``keys``), the nesting bound's bookkeeping (``headroom``) and the bytes
that can follow each rule (``follow``, which narrows a lexeme's walks). The mask
engine (:mod:`jsonmode.decoding.engine`) walks what this builds; nothing here knows of
tokens.
"""
