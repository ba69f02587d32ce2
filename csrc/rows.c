#include "native.h"

/* ------------------------------------------------------------------------------ */
/* apply_rows: logits rows restricted to id lists, the GIL released                */
/*
 * One call restricts a batch's rows: each row is a job (a banned list: a scatter of
 * the -inf bits; an allowed list: a gather of the kept items, a fill of the row, a
 * scatter back). Jobs are claimed one at a time from an atomic counter by the
 * calling thread and by up to threads - 1 helpers of a pool kept between calls (see
 * pool_offer), so a helper that the scheduler wakes late (a busy machine) costs
 * nothing: the caller claims every job itself and returns once each claimed job is
 * finished, never waiting for a helper to wake. The shared state (Batch) is on the
 * heap, counted, and freed by whichever of the caller and the helpers lets go of it
 * last; a helper touches the caller's buffers only through a job it claimed, and the
 * caller returns only after every job is done, so no helper reads a buffer after the
 * caller has released it. Everything is checked (GIL held) before the first write.
 */

typedef struct {
    char *row;          /* the row's first element */
    const int64_t *ids; /* allowed ids (keep) or banned ids, each in [0, width) */
    Py_ssize_t count;
    int keep;
} RowJob;

typedef struct {
    RowJob *jobs; /* the caller's: read only through a claimed job */
    Py_ssize_t njobs;
    Py_ssize_t width;
    int itemsize;
    uint64_t negative;
    Py_ssize_t next;  /* atomic: the next job to claim */
    Py_ssize_t done;  /* atomic: jobs finished */
    int refs;         /* atomic: the caller and each helper started */
    int seats;        /* atomic: scratch areas handed out */
    int seats_limit;  /* the scratch areas there are (the threads asked for) */
    size_t per;       /* scratch bytes per seat (the longest allowed list) */
    pthread_mutex_t lock;
    pthread_cond_t finished; /* signalled when done reaches njobs */
    char scratch[];   /* per * seats */
} Batch;

/* ``count`` items of ``size`` bytes at ``row``, each ``value``'s low bytes. On x86-64
 * (GCC or Clang): items up to the first 8-byte boundary, then ``rep stosq`` of the
 * pattern widened to 8 bytes, then the last items. The string store writes whole
 * cache lines without first reading them (fast-string operation), about half the
 * memory traffic of a store loop or memcpy's (measured: see batch_masks' module
 * docstring). Elsewhere: one item,
 * then copies from a small block that stays in the cache (memcpy's wide stores; the
 * item pattern is not one byte, so memset cannot). Rows start item-aligned. */
static void store_items(char *row, Py_ssize_t count, int size, uint64_t value) {
    for (Py_ssize_t k = 0; k < count; k++, row += size) {
        switch (size) {
        case 2: *(uint16_t *)row = (uint16_t)value; break;
        case 4: *(uint32_t *)row = (uint32_t)value; break;
        default: *(uint64_t *)row = value; break;
        }
    }
}

static void fill_items(char *row, Py_ssize_t count, int size, uint64_t value) {
    if (count <= 0) return;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    uint64_t wide = value;
    if (size == 2) {
        wide &= 0xffffu;
        wide |= wide << 16;
        wide |= wide << 32;
    } else if (size == 4) {
        wide &= 0xffffffffu;
        wide |= wide << 32;
    }
    Py_ssize_t head = (Py_ssize_t)(((8 - ((uintptr_t)row & 7)) & 7) / (uintptr_t)size);
    if (head > count) head = count;
    store_items(row, head, size, value);
    row += head * size;
    count -= head;
    size_t words = (size_t)count * (size_t)size / 8;
    if (words) {
        void *to = row;
        __asm__ volatile("rep stosq" : "+D"(to), "+c"(words) : "a"(wide) : "memory");
        Py_ssize_t done = (Py_ssize_t)((size_t)((char *)to - row) / (size_t)size);
        row = to;
        count -= done;
    }
    store_items(row, count, size, value);
#else
    store_items(row, 1, size, value);
    size_t total = (size_t)count * (size_t)size, have = (size_t)size;
    const size_t block = 4096;
    while (have < total && have < block) {
        size_t more = have < total - have ? have : total - have;
        memcpy(row + have, row, more);
        have += more;
    }
    while (have < total) {
        size_t more = have < total - have ? have : total - have;
        if (more > block) more = block;
        memcpy(row + have, row, more);
        have += more;
    }
#endif
}

#define RESTRICT_ROW(T)                                                           \
    do {                                                                          \
        T *r = (T *)job->row;                                                     \
        const int64_t *ids = job->ids;                                            \
        const Py_ssize_t count = job->count;                                      \
        const T neg = (T)b->negative;                                             \
        if (!job->keep) {                                                         \
            for (Py_ssize_t k = 0; k < count; k++) r[ids[k]] = neg;               \
        } else {                                                                  \
            T *kept = (T *)scratch;                                               \
            for (Py_ssize_t k = 0; k < count; k++) kept[k] = r[ids[k]];           \
            fill_items(job->row, b->width, (int)sizeof(T), b->negative);          \
            for (Py_ssize_t k = 0; k < count; k++) r[ids[k]] = kept[k];           \
        }                                                                         \
    } while (0)

static void batch_release(Batch *b) {
    if (__atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        pthread_cond_destroy(&b->finished);
        pthread_mutex_destroy(&b->lock);
        PyMem_RawFree(b);
    }
}

/* Claims and runs jobs until none is left; the one that finishes the last job wakes
 * the caller. */
static void batch_work(Batch *b) {
    int seat = __atomic_fetch_add(&b->seats, 1, __ATOMIC_RELAXED);
    if (seat >= b->seats_limit) return; /* (cannot happen: one seat per place offered) */
    char *scratch = b->scratch + b->per * (size_t)seat;
    for (;;) {
        Py_ssize_t i = __atomic_fetch_add(&b->next, 1, __ATOMIC_ACQUIRE);
        if (i >= b->njobs) return;
        const RowJob *job = &b->jobs[i];
        switch (b->itemsize) {
        case 2: RESTRICT_ROW(uint16_t); break;
        case 4: RESTRICT_ROW(uint32_t); break;
        default: RESTRICT_ROW(uint64_t); break;
        }
        if (__atomic_add_fetch(&b->done, 1, __ATOMIC_ACQ_REL) == b->njobs) {
            pthread_mutex_lock(&b->lock);
            pthread_cond_broadcast(&b->finished);
            pthread_mutex_unlock(&b->lock);
        }
    }
}

/* The helper pool: threads started on first need (at most MAX_THREADS - 1, never
 * more than a call asked for) and kept, asleep on pool_wake between calls, so a call
 * starts no thread once the pool is big enough. A call offers its batch in
 * pool_batch with a number of helpers wanted; each helper that wakes while it is on
 * offer takes one of those places (and a reference), works, and sleeps again. The
 * caller withdraws the offer when its jobs are done, so a helper that wakes late finds
 * nothing and sleeps. A second call running at the same time replaces the offer: the
 * first caller then finishes its rows with the helpers it has (its own thread at
 * least). After fork() the child has no helpers: pool_forked resets the pool. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_wake = PTHREAD_COND_INITIALIZER;
static int pool_size = 0;
static int pool_atfork = 0;
static Batch *pool_batch = NULL;
static int pool_wanted = 0;

static void pool_forked(void) {
    pthread_mutex_init(&pool_lock, NULL);
    pthread_cond_init(&pool_wake, NULL);
    pool_size = 0;
    pool_batch = NULL;
    pool_wanted = 0;
}

static void *pool_helper(void *arg) {
    (void)arg;
    pthread_mutex_lock(&pool_lock);
    for (;;) {
        Batch *b = pool_batch;
        if (b && pool_wanted > 0) {
            pool_wanted--;
            __atomic_add_fetch(&b->refs, 1, __ATOMIC_ACQ_REL);
            pthread_mutex_unlock(&pool_lock);
            batch_work(b);
            batch_release(b);
            pthread_mutex_lock(&pool_lock);
            continue;
        }
        pthread_cond_wait(&pool_wake, &pool_lock);
    }
    return NULL;
}

/* Offers ``b`` to ``helpers`` helpers, starting pool threads up to that many (fewer
 * when the system refuses one: the caller does their share). Called without the GIL. */
static void pool_offer(Batch *b, int helpers) {
    pthread_mutex_lock(&pool_lock);
    if (!pool_atfork) pool_atfork = pthread_atfork(NULL, NULL, pool_forked) == 0 ? 1 : -1;
    if (pool_size < helpers && pool_atfork == 1) {
        pthread_attr_t attr;
        if (pthread_attr_init(&attr) == 0) {
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            while (pool_size < helpers) {
                pthread_t helper;
                if (pthread_create(&helper, &attr, pool_helper, NULL) != 0) break;
                pool_size++;
            }
            pthread_attr_destroy(&attr);
        }
    }
    pool_batch = b;
    pool_wanted = helpers < pool_size ? helpers : pool_size;
    if (pool_wanted > 0) pthread_cond_broadcast(&pool_wake);
    pthread_mutex_unlock(&pool_lock);
}

static void pool_withdraw(Batch *b) {
    pthread_mutex_lock(&pool_lock);
    if (pool_batch == b) {
        pool_batch = NULL;
        pool_wanted = 0;
    }
    pthread_mutex_unlock(&pool_lock);
}

/* Runs the jobs on the calling thread and up to ``threads - 1`` pool helpers (the GIL
 * is released by the caller); returns when every job is done. 0, or -1 when the shared
 * state cannot be allocated (nothing written then). */
static int batch_run(RowJob *jobs, Py_ssize_t njobs, Py_ssize_t width, int itemsize, uint64_t negative,
                     Py_ssize_t most, int threads) {
    size_t per = (size_t)(most ? most : 1) * (size_t)itemsize;
    per = (per + 63) & ~(size_t)63; /* seats on their own cache lines */
    Batch *b = PyMem_RawCalloc(1, sizeof(Batch) + per * (size_t)threads);
    if (!b) return -1;
    b->jobs = jobs;
    b->njobs = njobs;
    b->width = width;
    b->itemsize = itemsize;
    b->negative = negative;
    b->refs = 1;
    b->seats_limit = threads;
    b->per = per;
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->finished, NULL);
    if (threads > 1) pool_offer(b, threads - 1);
    batch_work(b);
    if (threads > 1) pool_withdraw(b);
    pthread_mutex_lock(&b->lock);
    while (__atomic_load_n(&b->done, __ATOMIC_ACQUIRE) < njobs) pthread_cond_wait(&b->finished, &b->lock);
    pthread_mutex_unlock(&b->lock);
    batch_release(b);
    return 0;
}

PyObject *jm_apply_rows(PyObject *module, PyObject *args) {
    PyObject *host, *rows, *ids_list, *keeps;
    unsigned long long negative;
    int threads;
    if (!PyArg_ParseTuple(args, "OOOOKi", &host, &rows, &ids_list, &keeps, &negative, &threads)) return NULL;
    Py_buffer logits;
    if (PyObject_GetBuffer(host, &logits, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_ND) < 0) return NULL;
    PyObject *result = NULL;
    RowJob *jobs = NULL;
    Py_buffer *idviews = NULL;
    uint8_t *seen = NULL;
    Py_ssize_t taken = 0, njobs = 0, most = 0;
    if (logits.ndim != 2 || (logits.itemsize != 2 && logits.itemsize != 4 && logits.itemsize != 8)) {
        PyErr_SetString(PyExc_ValueError, "logits must be a 2-D buffer of 2, 4 or 8 byte items");
        goto done;
    }
    Py_ssize_t batch = logits.shape[0], width = logits.shape[1];
    if (!PyList_Check(rows) || !PyList_Check(ids_list) || !PyList_Check(keeps) ||
        PyList_GET_SIZE(ids_list) != PyList_GET_SIZE(rows) || PyList_GET_SIZE(keeps) != PyList_GET_SIZE(rows)) {
        PyErr_SetString(PyExc_ValueError, "rows, ids and keeps must be lists of one length");
        goto done;
    }
    njobs = PyList_GET_SIZE(rows);
    jobs = PyMem_Calloc((size_t)(njobs ? njobs : 1), sizeof(RowJob));
    idviews = PyMem_Calloc((size_t)(njobs ? njobs : 1), sizeof(Py_buffer));
    seen = PyMem_Calloc((size_t)(batch ? batch : 1), 1);
    if (!jobs || !idviews || !seen) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < njobs; i++) {
        Py_ssize_t r = PyLong_AsSsize_t(PyList_GET_ITEM(rows, i));
        if (r == -1 && PyErr_Occurred()) goto done;
        if (r < 0 || r >= batch || seen[r]) {
            PyErr_Format(PyExc_ValueError, "row %zd out of range or given twice", r);
            goto done;
        }
        seen[r] = 1;
        if (PyObject_GetBuffer(PyList_GET_ITEM(ids_list, i), &idviews[i], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            goto done;
        taken++;
        if (idviews[i].ndim != 1 || idviews[i].itemsize != 8 || !jm_is_int64(idviews[i].format)) {
            PyErr_SetString(PyExc_TypeError, "ids must be 1-D int64");
            goto done;
        }
        const int64_t *ids = idviews[i].buf;
        Py_ssize_t count = idviews[i].len / 8;
        for (Py_ssize_t k = 0; k < count; k++) {
            if (ids[k] < 0 || ids[k] >= width) {
                PyErr_Format(PyExc_ValueError, "id %lld outside the row's %zd columns", (long long)ids[k], width);
                goto done;
            }
        }
        int keep = PyObject_IsTrue(PyList_GET_ITEM(keeps, i));
        if (keep < 0) goto done;
        jobs[i].row = (char *)logits.buf + r * width * logits.itemsize;
        jobs[i].ids = ids;
        jobs[i].count = count;
        jobs[i].keep = keep;
        if (keep && count > most) most = count;
    }
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > njobs) threads = (int)njobs;
    if (threads < 1) threads = 1;
    int failed = 0;
    if (njobs) {
        Py_BEGIN_ALLOW_THREADS
        failed = batch_run(jobs, njobs, width, (int)logits.itemsize, (uint64_t)negative, most, threads);
        Py_END_ALLOW_THREADS
    }
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    for (Py_ssize_t i = 0; i < taken; i++) PyBuffer_Release(&idviews[i]);
    PyMem_Free(seen);
    PyMem_Free(idviews);
    PyMem_Free(jobs);
    PyBuffer_Release(&logits);
    return result;
}
