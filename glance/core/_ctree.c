/* Compiled kernels for glance.core.tree: the best-first budget search and the
 * ancestor-visibility matrix. glance.core.tree holds the reference Python versions,
 * which give the same results; it validates every input before calling here.
 *
 * Uses the buffer protocol only, so it builds without numpy headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double neg;   /* minus the path log-probability */
    int64_t depth;
    int64_t parent;
    int64_t rank;
} entry;

/* The order of glance.core.tree's heap tuples (neg, depth, parent, rank). */
static int before(const entry *a, const entry *b)
{
    if (a->neg != b->neg) return a->neg < b->neg;
    if (a->depth != b->depth) return a->depth < b->depth;
    if (a->parent != b->parent) return a->parent < b->parent;
    return a->rank < b->rank;
}

static void sift_down(entry *heap, Py_ssize_t size, Py_ssize_t i)
{
    entry item = heap[i];
    for (;;) {
        Py_ssize_t child = 2 * i + 1;
        if (child >= size) break;
        if (child + 1 < size && before(&heap[child + 1], &heap[child])) child++;
        if (!before(&heap[child], &item)) break;
        heap[i] = heap[child];
        i = child;
    }
    heap[i] = item;
}

static void sift_up(entry *heap, Py_ssize_t i)
{
    entry item = heap[i];
    while (i > 0) {
        Py_ssize_t up = (i - 1) / 2;
        if (!before(&item, &heap[up])) break;
        heap[i] = heap[up];
        i = up;
    }
    heap[i] = item;
}

/* best_first(lp, depth_max, k, branch_k, budget, parents, depths, ranks, negs) -> n
 *
 * lp: float64 (depth_max, k), rows sorted descending. The four outputs are
 * writable buffers of at least `budget` items (int64, int64, int64, float64).
 * Returns the number of nodes kept: min(budget, number of paths). */
static PyObject *best_first(PyObject *self, PyObject *args)
{
    Py_buffer lp_buf, par_buf, dep_buf, rank_buf, neg_buf;
    Py_ssize_t depth_max, k, branch_k, budget;
    if (!PyArg_ParseTuple(args, "y*nnnnw*w*w*w*", &lp_buf, &depth_max, &k, &branch_k, &budget,
                          &par_buf, &dep_buf, &rank_buf, &neg_buf))
        return NULL;
    PyObject *result = NULL;
    if (lp_buf.len < (Py_ssize_t)(depth_max * k * sizeof(double)) ||
        par_buf.len < (Py_ssize_t)(budget * sizeof(int64_t)) ||
        dep_buf.len < (Py_ssize_t)(budget * sizeof(int64_t)) ||
        rank_buf.len < (Py_ssize_t)(budget * sizeof(int64_t)) ||
        neg_buf.len < (Py_ssize_t)(budget * sizeof(double)) || depth_max < 1 || branch_k < 1 ||
        branch_k > k || budget < 1) {
        PyErr_SetString(PyExc_ValueError, "best_first: buffer sizes or counts do not agree");
        goto done;
    }
    const double *lp = (const double *)lp_buf.buf;
    int64_t *parents = (int64_t *)par_buf.buf;
    int64_t *depths = (int64_t *)dep_buf.buf;
    int64_t *ranks = (int64_t *)rank_buf.buf;
    double *negs = (double *)neg_buf.buf;

    /* Each kept node adds at most one net entry, so budget + 1 slots suffice. */
    entry *heap = PyMem_Malloc((size_t)(budget + 1) * sizeof(entry));
    if (heap == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t size = 1, index = 0;
    heap[0] = (entry){-lp[0], 1, -1, 0};
    const Py_ssize_t last = branch_k - 1;
    while (index < budget && size > 0) {
        entry top = heap[0];
        negs[index] = top.neg;
        depths[index] = top.depth;
        parents[index] = top.parent;
        ranks[index] = top.rank;
        int has_sibling = top.rank < last;
        entry sibling;
        if (has_sibling) {
            double base = top.parent >= 0 ? negs[top.parent] : 0.0;
            sibling = (entry){base - lp[(top.depth - 1) * k + top.rank + 1], top.depth, top.parent,
                              top.rank + 1};
        }
        if (top.depth < depth_max) {
            heap[0] = (entry){top.neg - lp[top.depth * k], top.depth + 1, index, 0};
            sift_down(heap, size, 0);
            if (has_sibling) {
                heap[size] = sibling;
                sift_up(heap, size);
                size++;
            }
        } else if (has_sibling) {
            heap[0] = sibling;
            sift_down(heap, size, 0);
        } else {
            size--;
            if (size > 0) {
                heap[0] = heap[size];
                sift_down(heap, size, 0);
            }
        }
        index++;
    }
    PyMem_Free(heap);
    result = PyLong_FromSsize_t(index);
done:
    PyBuffer_Release(&lp_buf);
    PyBuffer_Release(&par_buf);
    PyBuffer_Release(&dep_buf);
    PyBuffer_Release(&rank_buf);
    PyBuffer_Release(&neg_buf);
    return result;
}

/* 0 when parents[i] is -1 or an earlier node; else -1 with a ValueError set. */
static int check_parent(const int64_t *parents, Py_ssize_t i)
{
    int64_t p = parents[i];
    if (p < -1 || p >= i) {
        PyErr_Format(PyExc_ValueError,
                     "parents must be packed parents-first; node %zd has parent %lld", i,
                     (long long)p);
        return -1;
    }
    return 0;
}

/* Fill out (N+1, N+1) uint8 with the visibility of [root, node_0, ...]: row r
 * has 1 at every column it sees (the root, its ancestors, itself). Returns -1
 * with a ValueError set when parents are not packed parents-first. */
static int fill_visible(const int64_t *parents, Py_ssize_t n, uint8_t *out)
{
    Py_ssize_t n1 = n + 1;
    memset(out, 0, (size_t)(n1 * n1));
    out[0] = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (check_parent(parents, i) < 0) return -1;
        int64_t p = parents[i];
        uint8_t *row = out + (i + 1) * n1;
        memcpy(row, out + (p + 1) * n1, (size_t)(p + 2));
        row[i + 1] = 1;
    }
    return 0;
}

/* ancestor_visible(parents, out): out is uint8 (N+1, N+1); row r of
 * [root, node_0, ...] gets 1 at every column it sees (root, ancestors, itself).
 * parents: int64 (N,), parents-first, each in [-1, i). */
static PyObject *ancestor_visible(PyObject *self, PyObject *args)
{
    Py_buffer par_buf, out_buf;
    if (!PyArg_ParseTuple(args, "y*w*", &par_buf, &out_buf)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = par_buf.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t n1 = n + 1;
    if (out_buf.len != n1 * n1) {
        PyErr_SetString(PyExc_ValueError, "ancestor_visible: out must be (N+1, N+1) uint8");
        goto done;
    }
    if (fill_visible((const int64_t *)par_buf.buf, n, (uint8_t *)out_buf.buf) == 0)
        result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&par_buf);
    PyBuffer_Release(&out_buf);
    return result;
}

/* additive_mask(parents, past_len, out, itemsize, hidden): out is float32
 * (itemsize 4) or float64 (itemsize 8), (N+1, past_len+N+1): 0 where a row of
 * [root, node_0, ...] sees (the past, the root, its ancestors, itself) and
 * `hidden` elsewhere. parents: int64 (N,), parents-first. */
static PyObject *additive_mask(PyObject *self, PyObject *args)
{
    Py_buffer par_buf, out_buf;
    Py_ssize_t past, itemsize;
    double hidden;
    if (!PyArg_ParseTuple(args, "y*nw*nd", &par_buf, &past, &out_buf, &itemsize, &hidden))
        return NULL;
    PyObject *result = NULL;
    uint8_t *seen = NULL;
    Py_ssize_t n = par_buf.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t n1 = n + 1, width = past + n1;
    if ((itemsize != 4 && itemsize != 8) || past < 0 || out_buf.len != n1 * width * itemsize) {
        PyErr_SetString(PyExc_ValueError, "additive_mask: out must be float32/64 (N+1, past+N+1)");
        goto done;
    }
    seen = PyMem_Malloc((size_t)(n1 * n1));
    if (seen == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (fill_visible((const int64_t *)par_buf.buf, n, seen) < 0) goto done;
    for (Py_ssize_t r = 0; r < n1; r++) {
        const uint8_t *row = seen + r * n1;
        if (itemsize == 4) {
            float *out = (float *)out_buf.buf + r * width;
            memset(out, 0, (size_t)past * sizeof(float));
            for (Py_ssize_t c = 0; c < n1; c++) out[past + c] = row[c] ? 0.0f : (float)hidden;
        } else {
            double *out = (double *)out_buf.buf + r * width;
            memset(out, 0, (size_t)past * sizeof(double));
            for (Py_ssize_t c = 0; c < n1; c++) out[past + c] = row[c] ? 0.0 : hidden;
        }
    }
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(seen);
    PyBuffer_Release(&par_buf);
    PyBuffer_Release(&out_buf);
    return result;
}

/* accept(parents, depths, tokens, target_next) -> list of node indices: the
 * longest accepted path, as glance.core.tree.accept_path defines it (the deepest
 * accepted node, the lowest index among equals, then up to the root). All
 * int64; target_next has N+1 entries. */
static PyObject *accept(PyObject *self, PyObject *args)
{
    Py_buffer par_buf, dep_buf, tok_buf, next_buf;
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &par_buf, &dep_buf, &tok_buf, &next_buf)) return NULL;
    PyObject *result = NULL;
    uint8_t *ok = NULL;
    Py_ssize_t n = par_buf.len / (Py_ssize_t)sizeof(int64_t);
    if (dep_buf.len != par_buf.len || tok_buf.len != par_buf.len ||
        next_buf.len != (n + 1) * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "accept: expected N parents, depths, tokens, N+1 next");
        goto done;
    }
    const int64_t *parents = (const int64_t *)par_buf.buf, *depths = (const int64_t *)dep_buf.buf;
    const int64_t *tokens = (const int64_t *)tok_buf.buf, *next = (const int64_t *)next_buf.buf;
    ok = PyMem_Malloc((size_t)(n > 0 ? n : 1));
    if (ok == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t leaf = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (check_parent(parents, i) < 0) goto done;
        int64_t p = parents[i];
        ok[i] = tokens[i] == next[p + 1] && (p < 0 || ok[p]);
        if (ok[i] && (leaf < 0 || depths[i] > depths[leaf])) leaf = i;
    }
    Py_ssize_t len = 0;
    for (Py_ssize_t i = leaf; i >= 0; i = parents[i]) len++;
    result = PyList_New(len);
    if (result == NULL) goto done;
    for (Py_ssize_t i = leaf, k = len - 1; i >= 0; i = parents[i], k--) {
        PyObject *v = PyLong_FromSsize_t(i);
        if (v == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, k, v);
    }
done:
    PyMem_Free(ok);
    PyBuffer_Release(&par_buf);
    PyBuffer_Release(&dep_buf);
    PyBuffer_Release(&tok_buf);
    PyBuffer_Release(&next_buf);
    return result;
}

static PyMethodDef methods[] = {
    {"best_first", best_first, METH_VARARGS, "Best-first budget search (see glance.core.tree)."},
    {"ancestor_visible", ancestor_visible, METH_VARARGS,
     "Ancestor-visibility matrix of a parents-first tree (see glance.core.tree)."},
    {"additive_mask", additive_mask, METH_VARARGS,
     "The verify pass's additive mask, past columns included (see glance.core.tree)."},
    {"accept", accept, METH_VARARGS, "The longest accepted path (see glance.core.tree)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "glance._ctree", "Compiled kernels for glance.core.tree.", -1, methods,
};

PyMODINIT_FUNC PyInit__ctree(void) { return PyModule_Create(&module); }
