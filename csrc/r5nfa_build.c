#include "native.h"

/* r5nfa_determinise: a rule's NFA built from its expression, then determinised.
 *
 * The C form of jsonmode.decoding.automata.network._determinise_nfa: the NFA that
 * network._NFA.fragment writes for an expression (Lit, Lex, Call, Seq, Alt, Rep,
 * Members: ir.py's classes, handed in and matched by exact type as the Python form
 * matches them), its states numbered alike and each state's edges and calls in the
 * same order, goes straight into subset.c's construction (jm_subset_of), without the
 * Python lists between them. A lexeme is embedded from its automaton's table
 * (``lex.dfa.trans``: int32 or int64, [n, 256], any strides) as network._embed embeds
 * _lex_rows: per state its runs of equal live targets, in byte order.
 *
 * Budgets as in the Python form: on entering each node, once the NFA has grown past
 * the last check point, more than 4 * budget states (4: network._NFA_PER_DFA_STATE)
 * raise error("states per rule", budget), else checkpoint() is called and the next
 * check point is 1 024 states on; a literal that would take the NFA past 4 * budget
 * states raises before it is written. (An any-order Members node whose lattice takes
 * it past that raises before writing the lattice, where the Python form writes it
 * and raises at its next node: the same error at the same point, without the memory.)
 * At most 2**30 NFA states (MemoryError beyond).
 *
 * Safety: the expression is walked with a heap stack of frames, never recursion on
 * the C stack (it nests as deep as the caller made it: where the Python form runs
 * out of recursion, this one answers); each frame holds references to what it reads
 * (checkpoint runs arbitrary code, which may rebind a node's attributes). Malformed
 * nodes (an attribute missing or of the wrong type, a table of the wrong shape, a
 * target or start out of range) raise TypeError or ValueError. The GIL is held
 * throughout. Cost: linear in the NFA (a lexeme: its table's 256 entries a state),
 * then subset.c's. */

enum { K_LIT, K_LEX, K_CALL, K_SEQ, K_ALT, K_REP, K_MEMBERS, K_KINDS };
enum { F_SEQ, F_ALT, F_REP, F_MEMBERS, F_ANY };

#define MAX_NFA_STATES (1 << 30)

typedef struct {
    int kind, phase, wrote, unbounded;
    PyObject *items; /* owned: Seq's items, Alt's options, Members' members (a tuple) */
    PyObject *item;  /* owned: Rep's item, Members' sep */
    PyObject *extra; /* owned: Members' extra, or NULL */
    int32_t start, end, here, there, base;
    int64_t i, count, span;
    uint64_t mask, needed;
} Frame;

typedef struct {
    PyTypeObject *kinds[K_KINDS];
    PyObject *checkpoint, *error;
    long long budget;
    int64_t limit, check_at;
    int32_t n;
    I32Vec eps_from, eps_to, edge_from, call_from, call_name, call_to, sorted;
    I64Vec edges;
    PyObject *names, *name_index;
    Frame *frames;
    Py_ssize_t depth, cap;
} Build;

/* The attribute names read, interned once. */
enum { A_DATA, A_DFA, A_TRANS, A_ACCEPTING, A_START, A_RULE, A_ITEMS, A_OPTIONS, A_ITEM, A_LOW, A_HIGH,
       A_MEMBERS, A_EXTRA, A_SEP, A_ANY_ORDER, A_COUNT };
static const char *const attr_text[A_COUNT] = {"data", "dfa", "trans", "accepting", "start", "rule", "items",
                                               "options", "item", "low", "high", "members", "extra", "sep",
                                               "any_order"};
static PyObject *attr[A_COUNT];

static int attrs_ready(void) {
    if (attr[A_COUNT - 1]) return 0;
    for (int i = 0; i < A_COUNT; i++)
        if (!attr[i] && !(attr[i] = PyUnicode_InternFromString(attr_text[i]))) return -1;
    return 0;
}

/* An attribute of a node (new reference); a node without it is of the wrong type
 * (TypeError, not AttributeError). */
static PyObject *get(PyObject *node, int which) {
    PyObject *value = PyObject_GetAttr(node, attr[which]);
    if (!value && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%.100s has no attribute %s", Py_TYPE(node)->tp_name, attr_text[which]);
    }
    return value;
}

static int budget_error(Build *b) {
    PyObject *exc = PyObject_CallFunction(b->error, "sL", "states per rule", b->budget);
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return -1;
}

static int32_t new_states(Build *b, int64_t count) {
    if (count < 0 || count > MAX_NFA_STATES - (int64_t)b->n) {
        PyErr_SetString(PyExc_MemoryError, "a rule's NFA past 2**30 states");
        return -1;
    }
    int32_t first = b->n;
    b->n += (int32_t)count;
    return first;
}

static inline int eps(Build *b, int32_t from, int32_t to) {
    return v32_push(&b->eps_from, from) < 0 || v32_push(&b->eps_to, to) < 0 ? -1 : 0;
}

static inline int edge(Build *b, int32_t from, int lo, int hi, int32_t to) {
    return v32_push(&b->edge_from, from) < 0 || vec_push(&b->edges, JM_PACK(lo, hi, to)) < 0 ? -1 : 0;
}

/* fragment()'s budget check, on entering a node. */
static int entry_check(Build *b) {
    if (b->n <= b->check_at) return 0;
    if (b->n > b->limit) return budget_error(b);
    PyObject *r = PyObject_CallNoArgs(b->checkpoint);
    if (!r) return -1;
    Py_DECREF(r);
    b->check_at = b->limit < (int64_t)b->n + 1024 ? b->limit : (int64_t)b->n + 1024;
    return 0;
}

/* A new frame (zeroed), or NULL with MemoryError. Invalidates earlier frame pointers. */
static Frame *push(Build *b, int kind, int32_t start, int32_t end) {
    if (b->depth == b->cap) {
        Py_ssize_t cap = b->cap ? 2 * b->cap : 32;
        Frame *frames = PyMem_Realloc(b->frames, (size_t)cap * sizeof(Frame));
        if (!frames) {
            PyErr_NoMemory();
            return NULL;
        }
        b->frames = frames;
        b->cap = cap;
    }
    Frame *f = &b->frames[b->depth++];
    memset(f, 0, sizeof *f);
    f->kind = kind;
    f->start = start;
    f->end = end;
    return f;
}

static void pop(Build *b) {
    Frame *f = &b->frames[--b->depth];
    Py_XDECREF(f->items);
    Py_XDECREF(f->item);
    Py_XDECREF(f->extra);
}

/* An attribute that must be a tuple (new reference), else TypeError. */
static PyObject *tuple_attr(PyObject *node, int which) {
    PyObject *value = get(node, which);
    if (value && !PyTuple_Check(value)) {
        PyErr_Format(PyExc_TypeError, "an expression's %s must be a tuple", attr_text[which]);
        Py_CLEAR(value);
    }
    return value;
}

/* An int attribute (bool included) as int64, saturated; -1 with an exception set. */
static int int_attr(PyObject *value, int64_t *out) {
    if (!PyLong_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "a repetition's bounds must be ints");
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = overflow > 0 ? INT64_MAX : overflow < 0 ? INT64_MIN : (int64_t)v;
    return 0;
}

/* A member (member, required) pair of a Members node's tuple (borrowed), else TypeError. */
static PyObject *pair_at(PyObject *members, Py_ssize_t index) {
    PyObject *pair = PyTuple_GET_ITEM(members, index);
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
        PyErr_SetString(PyExc_TypeError, "a member must be a (member, required) tuple");
        return NULL;
    }
    return pair;
}

static int lit(Build *b, PyObject *node, int32_t start, int32_t end) {
    PyObject *data = get(node, A_DATA);
    if (!data) return -1;
    int failed = 0;
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "a literal's data must be bytes");
        failed = 1;
    } else if (PyBytes_GET_SIZE(data) == 0) {
        failed = eps(b, start, end) < 0;
    } else if ((int64_t)b->n + PyBytes_GET_SIZE(data) > b->limit) {
        failed = budget_error(b) < 0;
    } else {
        const unsigned char *bytes = (const unsigned char *)PyBytes_AS_STRING(data);
        Py_ssize_t size = PyBytes_GET_SIZE(data);
        int32_t here = start;
        for (Py_ssize_t i = 0; i < size && !failed; i++) {
            int32_t there = i == size - 1 ? end : new_states(b, 1);
            failed = there < 0 || edge(b, here, bytes[i], bytes[i], there) < 0;
            here = there;
        }
    }
    Py_DECREF(data);
    return failed ? -1 : 0;
}

static int call(Build *b, PyObject *node, int32_t start, int32_t end) {
    PyObject *rule = get(node, A_RULE);
    if (!rule) return -1;
    int failed = 1;
    if (!PyUnicode_CheckExact(rule)) {
        PyErr_SetString(PyExc_TypeError, "a call's rule must be a str");
        goto done;
    }
    PyObject *known = PyDict_GetItemWithError(b->name_index, rule);
    int64_t number;
    if (known) {
        number = as_i64(known);
    } else {
        if (PyErr_Occurred()) goto done;
        number = PyList_GET_SIZE(b->names);
        PyObject *boxed = PyLong_FromLongLong(number);
        if (!boxed) goto done;
        int bad = PyDict_SetItem(b->name_index, rule, boxed) < 0 || PyList_Append(b->names, rule) < 0;
        Py_DECREF(boxed);
        if (bad) goto done;
    }
    failed = v32_push(&b->call_from, start) < 0 || v32_push(&b->call_name, (int32_t)number) < 0 ||
             v32_push(&b->call_to, end) < 0;
done:
    Py_DECREF(rule);
    return failed ? -1 : 0;
}

static int is_int_format(const char *format, Py_ssize_t itemsize) {
    return itemsize == 4 ? jm_is_int32(format) : itemsize == 8 ? jm_is_int64(format) : 0;
}

static int is_flag_format(const char *format) {
    if (!format) return 1;
    if (*format == '@' || *format == '=' || *format == '<' || *format == '|') format++;
    return (format[0] == '?' || format[0] == 'b' || format[0] == 'B') && format[1] == '\0';
}

/* network._NFA._embed: the lexeme's automaton as states of their own (its rows' runs
 * of equal live targets, in byte order; flagged sorted), entered from ``start`` by an
 * epsilon move to its start state, left to ``end`` from each accepting state. */
static int embed(Build *b, PyObject *node, int32_t start, int32_t end) {
    PyObject *dfa = NULL, *trans = NULL, *accepting = NULL, *first_obj = NULL, *index = NULL;
    Py_buffer tv = {0}, av = {0};
    int have_t = 0, have_a = 0, failed = 1;
    if (!(dfa = get(node, A_DFA)) || !(trans = get(dfa, A_TRANS)) ||
        !(accepting = get(dfa, A_ACCEPTING)) || !(first_obj = get(dfa, A_START)))
        goto done;
    if (PyObject_GetBuffer(trans, &tv, PyBUF_RECORDS_RO) < 0) goto done;
    have_t = 1;
    if (tv.ndim != 2 || tv.shape[1] != 256 || !is_int_format(tv.format, tv.itemsize)) {
        PyErr_SetString(PyExc_TypeError, "a lexeme's table must be int32 or int64, [n, 256]");
        goto done;
    }
    Py_ssize_t rows = tv.shape[0];
    if (PyObject_GetBuffer(accepting, &av, PyBUF_RECORDS_RO) < 0) goto done;
    have_a = 1;
    if (av.ndim != 1 || av.itemsize != 1 || !is_flag_format(av.format)) {
        PyErr_SetString(PyExc_TypeError, "a lexeme's accepting flags must be a 1-D bool array");
        goto done;
    }
    if (av.shape[0] != rows) {
        PyErr_SetString(PyExc_ValueError, "a lexeme's accepting flags must be one a state");
        goto done;
    }
    if (!(index = PyNumber_Index(first_obj))) goto done;
    int64_t first = as_i64(index);
    if (first == -1 && PyErr_Occurred()) goto done;
    if (first < 0 || first >= rows) {
        PyErr_SetString(PyExc_ValueError, "a lexeme's start state out of range");
        goto done;
    }
    int32_t base = new_states(b, rows);
    if (base < 0) goto done;
    const char *buf = tv.buf;
    for (Py_ssize_t r = 0; r < rows; r++) {
        int64_t prev = -1;
        int lo = 0;
        for (int c = 0; c <= 256; c++) {
            int64_t t = -1;
            if (c < 256) {
                const char *at = buf + r * tv.strides[0] + c * tv.strides[1];
                if (tv.itemsize == 4) {
                    int32_t v;
                    memcpy(&v, at, 4);
                    t = v;
                } else {
                    memcpy(&t, at, 8);
                }
                if (t == prev) continue;
                if (t >= rows) {
                    PyErr_SetString(PyExc_ValueError, "a lexeme's target out of range");
                    goto done;
                }
            }
            if (prev >= 0 && edge(b, base + (int32_t)r, lo, c - 1, base + (int32_t)prev) < 0) goto done;
            prev = t < 0 ? -1 : t; /* (any negative target: none, one run) */
            lo = c;
        }
    }
    if (eps(b, start, base + (int32_t)first) < 0) goto done;
    const char *flags = av.buf;
    for (Py_ssize_t r = 0; r < rows; r++)
        if (flags[r * av.strides[0]] && eps(b, base + (int32_t)r, end) < 0) goto done;
    failed = v32_push(&b->sorted, base) < 0 || v32_push(&b->sorted, (int32_t)rows) < 0;
done:
    if (have_a) PyBuffer_Release(&av);
    if (have_t) PyBuffer_Release(&tv);
    Py_XDECREF(dfa);
    Py_XDECREF(trans);
    Py_XDECREF(accepting);
    Py_XDECREF(first_obj);
    Py_XDECREF(index);
    return failed ? -1 : 0;
}

/* A sequence of the items of ``items`` (a tuple) from ``start`` to ``end`` (a Seq
 * node's, or the Python form's Seq((sep, member)) of an any-order object). */
static int sequence(Build *b, PyObject *items, int32_t start, int32_t end) {
    if (PyTuple_GET_SIZE(items) == 0) return eps(b, start, end);
    Frame *f = push(b, F_SEQ, start, end);
    if (!f) return -1;
    f->items = Py_NewRef(items);
    f->count = PyTuple_GET_SIZE(items);
    f->here = start;
    return 0;
}

static int rep(Build *b, PyObject *node, int32_t start, int32_t end) {
    PyObject *item = get(node, A_ITEM), *low_obj = NULL, *high_obj = NULL;
    int failed = 1;
    int64_t low, high = 0;
    if (!item || !(low_obj = get(node, A_LOW)) || !(high_obj = get(node, A_HIGH)))
        goto done;
    int unbounded = high_obj == Py_None;
    if (int_attr(low_obj, &low) < 0 || (!unbounded && int_attr(high_obj, &high) < 0)) goto done;
    int32_t here = start;
    if (low == 0 && unbounded) {
        /* (The loop returns to a state of its own: see _repeat.) */
        if ((here = new_states(b, 1)) < 0 || eps(b, start, here) < 0) goto done;
    }
    Frame *f = push(b, F_REP, start, end);
    if (!f) goto done;
    f->item = Py_NewRef(item);
    f->here = here;
    f->count = low > 0 ? low : 0;
    f->unbounded = unbounded;
    int64_t span = 0;
    if (!unbounded && high > low && __builtin_sub_overflow(high, low, &span)) span = INT64_MAX;
    f->span = span;
    f->phase = 1;
    failed = 0;
done:
    Py_XDECREF(item);
    Py_XDECREF(low_obj);
    Py_XDECREF(high_obj);
    return failed ? -1 : 0;
}

static int members(Build *b, PyObject *node, int32_t start, int32_t end) {
    PyObject *list = tuple_attr(node, A_MEMBERS), *extra = NULL, *sep = NULL, *any = NULL;
    int failed = 1;
    if (!list || !(extra = get(node, A_EXTRA)) || !(sep = get(node, A_SEP)) ||
        !(any = get(node, A_ANY_ORDER)))
        goto done;
    int any_order = PyObject_IsTrue(any);
    if (any_order < 0) goto done;
    Py_ssize_t count = PyTuple_GET_SIZE(list);
    int has_extra = extra != Py_None;
    int32_t base;
    uint64_t needed = 0;
    if (!any_order) {
        /* fresh[i] = base + i (nothing written yet), after[i] = base + count + 1 + i. */
        if ((base = new_states(b, 2 * ((int64_t)count + 1))) < 0 || eps(b, start, base) < 0) goto done;
    } else {
        /* The lattice: state (mask, wrote) = base + 2 * mask + wrote. */
        int64_t total = count < 40 ? (int64_t)2 << count : INT64_MAX;
        if ((count || has_extra) && (total > b->limit || (int64_t)b->n > b->limit - total)) {
            /* (The Python form writes the lattice, then its first fragment raises.) */
            budget_error(b);
            goto done;
        }
        if ((base = new_states(b, total)) < 0 || eps(b, start, base) < 0) goto done;
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *pair = pair_at(list, i);
            if (!pair) goto done;
            int required = PyObject_IsTrue(PyTuple_GET_ITEM(pair, 1));
            if (required < 0) goto done;
            if (required) needed |= (uint64_t)1 << i;
        }
    }
    Frame *f = push(b, any_order ? F_ANY : F_MEMBERS, start, end);
    if (!f) goto done;
    f->items = Py_NewRef(list);
    f->item = Py_NewRef(sep);
    f->extra = has_extra ? Py_NewRef(extra) : NULL;
    f->base = base;
    f->count = count;
    f->needed = needed;
    failed = 0;
done:
    Py_XDECREF(list);
    Py_XDECREF(extra);
    Py_XDECREF(sep);
    Py_XDECREF(any);
    return failed ? -1 : 0;
}

/* network._NFA.fragment on entry: the budget check, then a leaf written or a frame
 * pushed for the node's parts. */
static int enter(Build *b, PyObject *node, int32_t start, int32_t end) {
    if (entry_check(b) < 0) return -1;
    PyTypeObject *type = Py_TYPE(node);
    if (type == b->kinds[K_LIT]) return lit(b, node, start, end);
    if (type == b->kinds[K_SEQ] || type == b->kinds[K_ALT]) {
        int is_seq = type == b->kinds[K_SEQ];
        PyObject *items = tuple_attr(node, is_seq ? A_ITEMS : A_OPTIONS);
        if (!items) return -1;
        int failed;
        if (is_seq) {
            failed = sequence(b, items, start, end) < 0;
        } else {
            Frame *f = PyTuple_GET_SIZE(items) ? push(b, F_ALT, start, end) : NULL;
            failed = PyTuple_GET_SIZE(items) && !f;
            if (f) {
                f->items = Py_NewRef(items);
                f->count = PyTuple_GET_SIZE(items);
            }
        }
        Py_DECREF(items);
        return failed ? -1 : 0;
    }
    if (type == b->kinds[K_CALL]) return call(b, node, start, end);
    if (type == b->kinds[K_LEX]) return embed(b, node, start, end);
    if (type == b->kinds[K_REP]) return rep(b, node, start, end);
    if (type == b->kinds[K_MEMBERS]) return members(b, node, start, end);
    PyErr_Format(PyExc_TypeError, "not an expression: %.200s", type->tp_name);
    return -1;
}

/* One step of the top frame: a child entered, or the frame's own moves written (and
 * the frame popped when done). */
static int step(Build *b) {
    Frame *f = &b->frames[b->depth - 1];
    switch (f->kind) {
    case F_SEQ: {
        if (f->i == f->count) break;
        Py_ssize_t i = (Py_ssize_t)f->i++;
        int32_t here = f->here, there = i == f->count - 1 ? f->end : new_states(b, 1);
        if (there < 0) return -1;
        f->here = there;
        return enter(b, PyTuple_GET_ITEM(f->items, i), here, there); /* (the frame holds the tuple) */
    }
    case F_ALT:
        if (f->i == f->count) break;
        return enter(b, PyTuple_GET_ITEM(f->items, (Py_ssize_t)f->i++), f->start, f->end);
    case F_REP:
        if (f->phase == 1) { /* the ``low`` copies */
            if (f->i < f->count) {
                f->i++;
                int32_t here = f->here, there = new_states(b, 1);
                if (there < 0) return -1;
                f->here = there;
                return enter(b, f->item, here, there);
            }
            if (eps(b, f->here, f->end) < 0) return -1;
            if (f->unbounded) {
                int32_t loop = new_states(b, 1);
                if (loop < 0) return -1;
                f->there = loop;
                f->phase = 2;
                return enter(b, f->item, f->here, loop);
            }
            f->phase = 3;
            f->i = 0;
            return 0;
        }
        if (f->phase == 2) { /* the loop back */
            if (eps(b, f->there, f->here) < 0) return -1;
            break;
        }
        if (f->phase == 4) { /* after an optional copy */
            f->phase = 3;
            return eps(b, f->here, f->end);
        }
        if (f->i < f->span) { /* the optional copies */
            f->i++;
            int32_t here = f->here, there = new_states(b, 1);
            if (there < 0) return -1;
            f->here = there;
            f->phase = 4;
            return enter(b, f->item, here, there);
        }
        break;
    case F_MEMBERS: {
        int32_t count = (int32_t)f->count, i = (int32_t)f->i;
        int32_t fresh = f->base + i, after = f->base + count + 1 + i;
        if (f->phase < 10 && i == count) {
            f->phase = 10;
            f->i = 0;
            return 0;
        }
        switch (f->phase) {
        case 0: { /* the separator into a member's copy, */
            if (!pair_at(f->items, i)) return -1;
            int32_t ready = new_states(b, 1);
            if (ready < 0 || eps(b, fresh, ready) < 0) return -1;
            f->there = ready;
            f->phase = 1;
            return enter(b, f->item, after, ready);
        }
        case 1: /* the member, */
            f->phase = 2;
            return enter(b, PyTuple_GET_ITEM(PyTuple_GET_ITEM(f->items, i), 0), f->there, after + 1);
        case 2: { /* skipped when optional */
            int needed = PyObject_IsTrue(PyTuple_GET_ITEM(PyTuple_GET_ITEM(f->items, i), 1));
            if (needed < 0) return -1;
            if (!needed && (eps(b, fresh, fresh + 1) < 0 || eps(b, after, after + 1) < 0)) return -1;
            f->i++;
            f->phase = 0;
            return 0;
        }
        case 10: { /* the extra members, at each position */
            if (!f->extra || i == count + 1) {
                int32_t last_fresh = f->base + count, last_after = f->base + 2 * count + 1;
                if (eps(b, last_fresh, f->end) < 0 || eps(b, last_after, f->end) < 0) return -1;
                break;
            }
            int32_t ready = new_states(b, 1);
            if (ready < 0 || eps(b, fresh, ready) < 0) return -1;
            f->there = ready;
            f->phase = 11;
            return enter(b, f->item, after, ready);
        }
        case 11:
            f->phase = 12;
            return enter(b, f->extra, f->there, after);
        default: /* 12 */
            f->i++;
            f->phase = 10;
            return 0;
        }
        break;
    }
    case F_ANY:
        /* (mask, wrote) in order, (mask, 0) skipped for a mask not empty; at each, the
         * members not in the mask (i < count), the extra (i == count), the exit. */
        while (f->mask < ((uint64_t)1 << f->count)) {
            if (f->mask && !f->wrote) {
                f->wrote = 1;
                continue;
            }
            int32_t here = f->base + 2 * (int32_t)f->mask + f->wrote;
            if (f->i <= f->count) {
                Py_ssize_t i = (Py_ssize_t)f->i++;
                PyObject *part;
                int32_t target;
                if (i < f->count) {
                    if (f->mask & ((uint64_t)1 << i)) continue;
                    PyObject *pair = pair_at(f->items, i);
                    if (!pair) return -1;
                    part = PyTuple_GET_ITEM(pair, 0);
                    target = f->base + 2 * (int32_t)(f->mask | ((uint64_t)1 << i)) + 1;
                } else {
                    if (!f->extra) continue;
                    part = f->extra;
                    target = f->base + 2 * (int32_t)f->mask + 1;
                }
                if (!f->wrote) return enter(b, part, here, target);
                /* Seq((sep, part)): entered as a node of its own. */
                PyObject *pair = PyTuple_Pack(2, f->item, part);
                if (!pair) return -1;
                int failed = entry_check(b) < 0 || sequence(b, pair, here, target) < 0;
                Py_DECREF(pair);
                return failed ? -1 : 0;
            }
            if ((f->mask & f->needed) == f->needed && eps(b, here, f->end) < 0) return -1;
            f->i = 0;
            if (f->wrote) f->mask++;
            f->wrote = !f->wrote;
        }
        break;
    }
    pop(b);
    return 0;
}

/* ``from``/``to`` pairs (and ``packed`` values alongside, when given) grouped by
 * ``from`` in a stable order: offsets ``off`` (n + 1) and the values in ``out``. */
static int group_by_state(Py_ssize_t n, const I32Vec *from, const I32Vec *to, const I64Vec *packed, I64Vec *off,
                          I32Vec *out32, I64Vec *out64) {
    Py_ssize_t m = from->size;
    if (vec_reserve(off, n + 1) < 0) return -1;
    memset(off->data, 0, (size_t)(n + 1) * sizeof(int64_t));
    off->size = n + 1;
    for (Py_ssize_t k = 0; k < m; k++) off->data[from->data[k] + 1]++;
    for (Py_ssize_t s = 0; s < n; s++) off->data[s + 1] += off->data[s];
    int64_t *at = PyMem_RawMalloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!at) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(at, off->data, (size_t)n * sizeof(int64_t));
    if ((to && v32_reserve(out32, m) < 0) || (packed && vec_reserve(out64, m) < 0)) {
        PyMem_RawFree(at);
        return -1;
    }
    for (Py_ssize_t k = 0; k < m; k++) {
        int64_t slot = at[from->data[k]]++;
        if (to) out32->data[slot] = to->data[k];
        if (packed) out64->data[slot] = packed->data[k];
    }
    if (to) out32->size = m;
    if (packed) out64->size = m;
    PyMem_RawFree(at);
    return 0;
}

/* The built NFA as subset.c reads it (jm_subset_of). */
static int flatten(Build *b, JmNfa *nfa) {
    Py_ssize_t n = nfa->n = b->n;
    if (group_by_state(n, &b->eps_from, &b->eps_to, NULL, &nfa->eps_off, &nfa->eps, NULL) < 0 ||
        group_by_state(n, &b->edge_from, NULL, &b->edges, &nfa->edge_off, NULL, &nfa->edges) < 0)
        return -1;
    /* Calls: names and targets moved together (by the position of each call). */
    I32Vec position = {0};
    if (v32_reserve(&position, b->call_from.size) < 0) return -1;
    for (Py_ssize_t k = 0; k < b->call_from.size; k++) position.data[k] = (int32_t)k;
    position.size = b->call_from.size;
    I32Vec order = {0};
    int failed = group_by_state(n, &b->call_from, &position, NULL, &nfa->call_off, &order, NULL) < 0 ||
                 v32_reserve(&nfa->call_name, order.size) < 0 || v32_reserve(&nfa->call_to, order.size) < 0;
    if (!failed) {
        for (Py_ssize_t k = 0; k < order.size; k++) {
            nfa->call_name.data[k] = b->call_name.data[order.data[k]];
            nfa->call_to.data[k] = b->call_to.data[order.data[k]];
        }
        nfa->call_name.size = nfa->call_to.size = order.size;
    }
    v32_free(&position);
    v32_free(&order);
    if (failed) return -1;
    if (!(nfa->plain = PyMem_RawCalloc((size_t)(n ? n : 1), 1))) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < b->sorted.size; k += 2)
        memset(nfa->plain + b->sorted.data[k], 1, (size_t)b->sorted.data[k + 1]);
    nfa->names = Py_NewRef(b->names);
    return 0;
}

static void build_free(Build *b) {
    while (b->depth) pop(b);
    PyMem_Free(b->frames);
    I32Vec *vs[] = {&b->eps_from, &b->eps_to, &b->edge_from, &b->call_from, &b->call_name, &b->call_to, &b->sorted};
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) v32_free(vs[i]);
    vec_free(&b->edges);
    Py_XDECREF(b->names);
    Py_XDECREF(b->name_index);
}

PyObject *r5nfa_determinise(PyObject *module, PyObject *args) {
    PyObject *expr, *classes, *checkpoint, *error;
    long long budget;
    int with_sets;
    if (!PyArg_ParseTuple(args, "OO!LOOp", &expr, &PyTuple_Type, &classes, &budget, &checkpoint, &error, &with_sets))
        return NULL;
    if (PyTuple_GET_SIZE(classes) != K_KINDS || !PyCallable_Check(checkpoint) || !PyExceptionClass_Check(error)) {
        PyErr_SetString(PyExc_TypeError, "r5nfa_determinise takes an expression, the 7 expression classes "
                                         "(Lit, Lex, Call, Seq, Alt, Rep, Members), an int budget, a callable "
                                         "and an exception class");
        return NULL;
    }
    if (attrs_ready() < 0) return NULL;
    Build b;
    memset(&b, 0, sizeof b);
    for (int k = 0; k < K_KINDS; k++) {
        PyObject *kind = PyTuple_GET_ITEM(classes, k);
        if (!PyType_Check(kind)) {
            PyErr_SetString(PyExc_TypeError, "the expression classes must be classes");
            return NULL;
        }
        b.kinds[k] = (PyTypeObject *)kind; /* (borrowed: the tuple is the caller's, alive throughout) */
    }
    b.checkpoint = checkpoint;
    b.error = error;
    b.budget = budget;
    b.limit = budget > INT64_MAX / 4 ? INT64_MAX : budget < INT64_MIN / 4 ? INT64_MIN : (int64_t)budget * 4;
    b.check_at = -1;
    PyObject *result = NULL;
    JmNfa nfa;
    memset(&nfa, 0, sizeof nfa);
    if (!(b.names = PyList_New(0)) || !(b.name_index = PyDict_New())) goto done;
    /* network._determinise_nfa: start 0, final 1, the expression between them. */
    if (new_states(&b, 2) < 0 || enter(&b, expr, 0, 1) < 0) goto done;
    while (b.depth)
        if (step(&b) < 0) goto done;
    if (flatten(&b, &nfa) < 0) goto done;
    build_free(&b);
    memset(&b, 0, sizeof b);
    return jm_subset_of(&nfa, 0, 1, budget, checkpoint, error, with_sets);
done:
    jm_nfa_free(&nfa);
    build_free(&b);
    return result;
}
