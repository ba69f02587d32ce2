/* jsonmode._native: the compiled kernels of the mask engine (see jsonmode/native.py).
 *
 * One file per kernel (trie.c, finish.c, rows.c, bits.c, stacks.c, regex.c, glushkov.c,
 * subset.c, r5nfa_build.c, ...; set_bits here), native.h shared.
 * Each kernel is the C form of a pure-Python function that stays in the package as
 * the reference and the fallback; the two must give the same answers, and the
 * differential tests (tests/test_native_*.py) hold them so:
 *
 *   Trie.walk_stacks  jsonmode.decoding.engine.trie.TokenTrie.walk_stacks
 *   Trie.walk         jsonmode.decoding.engine.trie.TokenTrie.walk (GIL released; a wide
 *                     walk, with inside flags, in preorder: r4gram_wide.c)
 *   finish            jsonmode.decoding.engine.boundary.Stacks.finish
 *   set_bits          jsonmode.decoding.engine.facts.set_ids (GIL released)
 *   Stacks            jsonmode.decoding.engine.boundary.Stacks's numbering and closures
 *                     (context, expand, readers, returns, stack; stacks.c): the walks
 *                     above take its closures directly when handed one as ``expand``
 *   apply_rows        jsonmode.decoding.batch_masks._apply_numpy (GIL released, rows
 *                     spread over threads)
 *   count_bits,       jsonmode.decoding.batch_masks.BatchMasker._build (a packed mask
 *   bit_ids           as the shorter of its id lists)
 *   minimize_raw      jsonmode.regex.char_dfa.minimize_raw (Hopcroft; regex.c)
 *   glushkov_determinise jsonmode.regex.glushkov._determinise (subset construction; glushkov.c)
 *   determinise       jsonmode.decoding.automata.network._determinise_py (the subset
 *                     construction of a rule's NFA; checkpoint called as there)
 *   r5nfa_determinise jsonmode.decoding.automata.network._determinise_nfa (a rule's NFA
 *                     built from its expression as _NFA.fragment builds it, then
 *                     determinised as above, without Python lists between; r5nfa_build.c)
 *   r3hits_fill_words the copy of jsonmode.decoding.matcher.Matcher.fill_bitmask (a
 *                     cached mask's bits into a caller's token bitmask; r3hits_fill.c)
 *   MissAssembler     jsonmode.decoding.engine.cache.MaskEngine._assemble over bits (a
 *                     mask-cache miss; r3miss_assemble.c; its unbudgeted trie walks by
 *                     sets of stacks: r7deep_sets.c, no method of its own)
 *   r5setup_row_reads jsonmode.decoding.reference._row_reads_python (which states of a
 *                     rule's table read a byte; r5setup_reads.c)
 *   r6dfa_byte_dfa    jsonmode.regex.byte_dfa._byte_dfa (a character DFA's byte table,
 *                     raw UTF-8 or a JSON string body; r6dfa_bytes.c)
 *   r6replay_states   jsonmode.decoding.engine.walk.Walks._replay (where a structural
 *                     rule's boundary tokens passed their crossing state; r6replay.c)
 *   r7hash_depths     jsonmode.decoding.engine.state.state_hashes's depth loop (bounded-
 *                     depth behaviour hashes over weighted edges; r7hash_depths.c)
 *   r6narrow_walk_cut jsonmode.decoding.engine.segments._trie_walk then _split (a narrow
 *                     state's trie walk cut into its per-first-byte segments, packed;
 *                     r6narrow_cut.c)
 *   r6narrow_live_keys jsonmode.decoding.engine.segments._live_keys (a state's live first
 *                     bytes and their segment keys; r6narrow_cut.c)
 *   r7count_replay    jsonmode.decoding.engine.trie.TokenTrie.replay (an automaton over
 *                     every trie node, with summed weights: the per-token character
 *                     counts of counted strings; r7count_replay.c)
 *   r7count_ids       Walks._char_counts's gathers of a replay by token id (r7count_replay.c)
 *   fill_ranges       jsonmode.decoding.engine.entries.ranges (r12ranges.c)
 *
 * Safety: every index read from a caller's buffer is checked against that buffer's
 * length (a bad one raises ValueError, never reads past it); work lists grow on the
 * heap, never on the C stack (no recursion); the walk keeps the Python budget of
 * (node, stack) pairs. The walk kernels hold the GIL (they call back into Python for
 * the stacks' closures); apply_rows checks its arguments with the GIL held, then
 * releases it while it writes.
 */
#include "native.h"


/* ------------------------------------------------------------------------------ */
/* set_bits: token ids into a bitmask                                               */

static PyObject *native_set_bits(PyObject *module, PyObject *args) {
    PyObject *bits_obj, *ids_obj;
    if (!PyArg_ParseTuple(args, "OO", &bits_obj, &ids_obj)) return NULL;
    Py_buffer bits, ids;
    if (PyObject_GetBuffer(bits_obj, &bits, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) return NULL;
    if (PyObject_GetBuffer(ids_obj, &ids, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&bits);
        return NULL;
    }
    PyObject *result = NULL;
    if (bits.itemsize != 1 || ids.itemsize != 8 || ids.ndim > 1 || !jm_is_int64(ids.format)) {
        PyErr_SetString(PyExc_TypeError, "set_bits takes a uint8 buffer and 1-D int64 ids");
        goto done;
    }
    const int64_t *id = ids.buf;
    Py_ssize_t count = ids.len / 8;
    int64_t limit = (int64_t)bits.len * 8;
    for (Py_ssize_t k = 0; k < count; k++) {
        if (id[k] < 0 || id[k] >= limit) {
            PyErr_Format(PyExc_ValueError, "id %lld outside the %lld bits", (long long)id[k], (long long)limit);
            goto done;
        }
    }
    uint8_t *out = bits.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < count; k++) out[id[k] >> 3] |= (uint8_t)(1u << (id[k] & 7));
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&ids);
    PyBuffer_Release(&bits);
    return result;
}

static PyMethodDef native_methods[] = {
    {"finish", jm_finish, METH_VARARGS,
     "finish(byte, kids, ends, pairs, tables, crossings, expand) -> list[int]\n\n"
     "Stacks.finish in C (see its docstring): the positions of the tokens whose rest\n"
     "one of ``pairs`` reads to its end, the rests given as their trie's lists."},
    {"set_bits", native_set_bits, METH_VARARGS,
     "set_bits(bits, ids) -> None\n\n"
     "In place: the bit of each id (bit id % 8 of byte id // 8) set in the uint8 buffer\n"
     "``bits``; ``ids`` 1-D int64, each checked first (ValueError, nothing set)."},
    {"apply_rows", jm_apply_rows, METH_VARARGS,
     "apply_rows(host, rows, ids, keeps, negative, threads) -> None\n\n"
     "In place: row rows[i] of the 2-D buffer ``host`` (the logits' bits, 2/4/8-byte\n"
     "items) gets ``negative`` at ids[i] (keeps[i] false), or everywhere but ids[i]\n"
     "(keeps[i] true), the rows spread over ``threads`` threads with the GIL released.\n"
     "Every argument is checked first (ValueError/TypeError, nothing written)."},
    {"count_bits", jm_count_bits, METH_VARARGS,
     "count_bits(bits, shared) -> int\n\n"
     "The set bits below ``shared`` of the uint8 buffer ``bits`` (token t: bit t % 8 of\n"
     "byte t // 8): the allowed tokens of a packed mask."},
    {"bit_ids", jm_bit_ids, METH_VARARGS,
     "bit_ids(bits, shared, width, keep, out) -> None\n\n"
     "BatchMasker._build over a packed mask: into the 1-D int64 buffer ``out`` (exactly\n"
     "the list's length, else ValueError), the allowed ids below ``shared`` (keep), or\n"
     "the banned ones below ``shared`` then ``shared``..``width - 1``."},
    {"minimize_raw", jm_minimize_raw, METH_VARARGS,
     "minimize_raw(start, accepting, edges, checkpoint) -> (accepting, edges)\n\n"
     "jsonmode.regex.char_dfa.minimize_raw in C: the trimmed, minimal, canonically\n"
     "numbered DFA's tuples. Rows must be sorted and disjoint (ValueError otherwise:\n"
     "the Python form then answers); checkpoint() is called as it goes."},
    {"glushkov_determinise", jm_glushkov_determinise, METH_VARARGS,
     "glushkov_determinise(cs, follow, last, univ, max_states, most, checkpoint)\n"
     "    -> (accepting, edges) | None\n\n"
     "jsonmode.regex.glushkov._determinise in C: the subset construction over the\n"
     "Glushkov positions (each position's class and follow set), minimised; None when\n"
     "more than max_states states or most positions (all states together) are needed."},
    {"determinise", jm_determinise, METH_VARARGS,
     "determinise(eps, edges, calls, sorted_rows, start, final, budget, checkpoint, error)\n"
     "-> (edges, calls, accepting, sets)\n\n"
     "network._determinise_py in C (see its docstring): the DFA of the NFA given as its\n"
     "lists, states numbered alike; error(\"states per rule\", budget) raised at the same\n"
     "new state; checkpoint() called every 16 DFA states. Every index is checked first\n"
     "(ValueError/TypeError)."},
    {"r5nfa_determinise", r5nfa_determinise, METH_VARARGS,
     "r5nfa_determinise(expr, classes, budget, checkpoint, error, with_sets)\n"
     "-> (edges, calls, accepting, sets, alone)\n\n"
     "network._determinise_nfa in C: the NFA network._NFA.fragment builds for ``expr``\n"
     "(start 0, final 1; ``classes`` the tuple (Lit, Lex, Call, Seq, Alt, Rep, Members)),\n"
     "determinised as determinise does: the same rows, calls and acceptance, ``sets``\n"
     "the DFA states' NFA sets (None unless with_sets), ``alone`` per state whether its\n"
     "set is the final state alone. error(\"states per rule\", budget) and checkpoint()\n"
     "where the Python form raises and calls them; malformed nodes raise TypeError or\n"
     "ValueError."},
    {"r3comp_fill", r3comp_fill, METH_VARARGS,
     "r3comp_fill(trans, edges, renumber) -> None\n\n"
     "network's finish in C: the int32 table ``trans`` (kept states x 256) set to -1, then\n"
     "each kept state's (lo, hi, target) edges to kept targets written, renumbered by\n"
     "``renumber`` (None: all kept; else per state its new number or -1)."},
    {"r3comp_object_build", r3comp_object_build, METH_VARARGS,
     "r3comp_object_build(opening, closing, keys, values, sep, candidates, closable, extra,\n"
     "    max_states, checkpoint, error) -> (edges, calls, accepting) | None\n\n"
     "objects._Builder.build in C (see its docstring): None where two parts read the same\n"
     "byte at the same point (the general path then builds the rule)."},
    {"r4comp_key_count", r4comp_key_count, METH_O,
     "r4comp_key_count(names) -> int\n\n"
     "keys.key_trie_size less one in C: the prefixes of ``names`` (a tuple of str, sorted,\n"
     "no repeats: else TypeError/ValueError) but the empty one."},
    {"r4comp_key_trie", r4comp_key_trie, METH_VARARGS,
     "r4comp_key_trie(names, parents, letters, owners, lengths, named, checkpoint) -> None\n\n"
     "keys.key_trie's loop in C: the trie of ``names`` (a tuple of str, sorted, no repeats)\n"
     "written to five int32 buffers sized as the names need (else ValueError);\n"
     "checkpoint() called before the names 0, 256, 512 ..."},
    {"r4comp_key_rows", r4comp_key_rows, METH_VARARGS,
     "r4comp_key_rows(trans, prefix, tail, parents, letters, count) -> None\n\n"
     "keys.extra_key_body's table in C: ``count`` prefix rows, the trie's edges, the tail\n"
     "rows (targets relative to count + 4; -(1 << 20): none), every index checked."},
    {"r3hits_fill_words", (PyCFunction)(void (*)(void))jm_r3hits_fill_words, METH_FASTCALL,
     "r3hits_fill_words(out, bits) -> bool\n\n"
     "Matcher.fill_bitmask's copy in C: the bytes of ``bits`` to the start of ``out`` (a\n"
     "writable, C-contiguous buffer of 4-byte items), the rest of ``out`` cleared; False,\n"
     "nothing written, when ``out`` is not such a buffer or is shorter than ``bits``."},
    {"r6narrow_walk_cut", r6narrow_walk_cut, METH_VARARGS,
     "r6narrow_walk_cut(trie, table, dead, crossing, first_nodes, offsets, firsts, targets,\n"
     "    small, cut, follow=None) -> (inside, bounds, segments)\n\n"
     "segments._trie_walk (not wide) then segments._split in C, the GIL released: the\n"
     "inside positions (int32 bytes, ascending), the boundary entries (int64 rows lo, hi,\n"
     "col, node, sorted by lo, stably) and, if ``cut``, per first byte the segment's\n"
     "(inside, entries) bytes (see csrc/r6narrow_cut.c). ``follow``: as Trie.walk's."},
    {"r6narrow_live_keys", r6narrow_live_keys, METH_VARARGS,
     "r6narrow_live_keys(flat, state, offsets, tags, fingerprint, signature)\n"
     "    -> (firsts, afters, keys)\n\n"
     "segments.assemble's live first bytes, their targets and segment keys (see\n"
     "csrc/r6narrow_cut.c)."},
    {"r5setup_row_reads", jm_r5setup_row_reads, METH_O,
     "r5setup_row_reads(trans) -> bytes\n\n"
     "reference._row_reads_python in C: per row of the int32 (n, 256) table ``trans``, 1\n"
     "where it holds any entry >= 0, else 0 (TypeError: not int32; ValueError: another\n"
     "shape, or not C-contiguous)."},
    {"r6dfa_byte_dfa", r6dfa_byte_dfa, METH_VARARGS,
     "r6dfa_byte_dfa(start, accepting, edges, json, complete, checkpoint)\n"
     "    -> (start, accepting, trans)\n\n"
     "jsonmode.regex.byte_dfa._byte_dfa in C over a minimised CharDFA's fields: the\n"
     "trimmed byte automaton the Python builder makes, numbered alike, as bytes (one\n"
     "0/1 flag per state; the int32 table, states x 256). Rows must be sorted, disjoint\n"
     "and within 0..0x10FFFF (ValueError otherwise: the Python form then answers);\n"
     "checkpoint() is called where the Python form calls it."},
    {"r6replay_states", r6replay_states, METH_VARARGS,
     "r6replay_states(table, state, matrix, positions, cols, out) -> None\n\n"
     "Walks._replay in C (GIL released): out[i] = the state reached from ``state`` by the\n"
     "int32 flat ``table`` over bytes 0 .. cols[i] - 1 of row positions[i] of the uint8\n"
     "``matrix`` (ValueError: an index or a step out of range; TypeError: a dtype)."},
    {"r7hash_depths", r7hash_depths, METH_VARARGS,
     "r7hash_depths(source, target, summed, base, dead, depths, out) -> None\n\n"
     "state_hashes's depth loop in C (GIL released): row k of the uint64 ``out`` gets each\n"
     "state's hash at depth depths[k], over the weighted edges (int64 source ascending,\n"
     "int64 target, dead: the slot ``states``; uint64 summed) from the uint64 ``base``\n"
     "(ValueError: an edge, a length or a depth out of range; TypeError: a dtype)."},
    {"r7count_replay", r7count_replay, METH_VARARGS,
     "r7count_replay(table, state, weights, parents, bytes, out_states, out_sums) -> None\n\n"
     "TokenTrie.replay in C (GIL released): per trie node (one numbering, parents first),\n"
     "the state after its prefix by the int32 flat ``table`` (no -1) from ``state``, and the\n"
     "int16 sum of ``weights`` along it (ValueError: an index or a step out of range;\n"
     "TypeError: a dtype)."},
    {"r7count_ids", r7count_ids, METH_VARARGS,
     "r7count_ids(states, sums, ends, ids, dead, closing, out_chars, out_closed) -> None\n\n"
     "A replay's characters begun and closing flags by token id (Walks._char_counts's\n"
     "gathers, in one pass; see csrc/r7count_replay.c)."},
    {"fill_ranges", r12fill_ranges, METH_VARARGS,
     "fill_ranges(lo, hi, out) -> None\n\n"
     "The integers lo[i] .. hi[i] - 1 of every range, back to back, into ``out`` (int64,\n"
     "exactly their number): entries.ranges in one pass (see csrc/r12ranges.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "jsonmode._native",
    "The compiled kernels of jsonmode's mask engine (see jsonmode.native).", -1, native_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&jm_TrieType) < 0 || PyType_Ready(&jm_StacksType) < 0 ||
        PyType_Ready(&jm_r3miss_AssemblerType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&native_module);
    if (!m) return NULL;
    Py_INCREF(&jm_TrieType);
    if (PyModule_AddObject(m, "Trie", (PyObject *)&jm_TrieType) < 0) {
        Py_DECREF(&jm_TrieType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&jm_StacksType);
    if (PyModule_AddObject(m, "Stacks", (PyObject *)&jm_StacksType) < 0) {
        Py_DECREF(&jm_StacksType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&jm_r3miss_AssemblerType);
    if (PyModule_AddObject(m, "MissAssembler", (PyObject *)&jm_r3miss_AssemblerType) < 0) {
        Py_DECREF(&jm_r3miss_AssemblerType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "KERNELS_VERSION", KERNELS_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
