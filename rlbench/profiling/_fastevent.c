/* The profiler's hot path in C: rlbench.profiling.autohooks.event_wrapper and env_wrapper, without a Python frame.
 *
 * An Event wraps one hooked callable (an env's step, nn.Module.__call__, Tensor.numpy, ...). It runs the common cases
 * of the Python wrapper it stands for, line for line: the pass-through of a nested call, a call of the same kind
 * within the merge gap (a merge), the transition from a pending phase to this one, and the lazy exit. It also runs
 * the cases of Attributor.enter and enter_forward that occur once per minibatch while the training forward is open
 * (see leave_forward and in_forward), and acting's two common cases (acting_call): the policy's next call while it
 * acts, and acting after a pending phase; an env step that starts a training iteration, in its common case
 * (start_iteration: an off-policy loop that updates every step starts one per env step). An Event built with `mark`
 * is instead a grad-mode block's __enter__ or __exit__ (mark_call). Everything else (the first phase under a parent,
 * the first iteration and those with memory marks or op counting, a module call outside the open training forward
 * that is not acting's common case (a target, the forward's first call, a module called for the first time), op
 * counting, traces, memory marks, an env class seen for the first time, an inner env to shadow) goes to the Python
 * wrapper it was built with (`fallback`), or to Attributor.enter/exit, exactly as the Python wrapper would.
 *
 * The Attributor stays a plain Python class with __slots__. An Event reads and writes its slots directly at the
 * offsets of their member descriptors, found once when it is built, so Python code sees ordinary attributes and
 * the two implementations share one state. autohooks.py is the reference: tests run both (RLBENCH_PURE_PYTHON_HOOKS).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <time.h>

enum {
    S_DEPTH, S_PENDING, S_AUTO_NAME, S_T_EXIT, S_T, S_MERGED, S_MERGES, S_SLOW, S_EXTRAS,
    S_UPDATED, S_STARTED, S_STACK, S_EXCL, S_ENTERS, S_PARENT, S_PASSTHROUGH, S_ENV_SELF, S_ENV_IDS, S_STEPS,
    S_MEM_LEFT, S_KINDS, S_FORWARD_NAMES, S_ENV_WIDTH, S_BLOCKS, S_BLOCK_T, S_ACT_RETURN, S_SEEN,
    S_PROFILER_ENABLED, S_SAVED_DEPTH, S_ITERATION_T, S_ITERATION_STEPS, S_ITERATION_EXCL, S_MEMORY, S_MEM_ON,
    S_RF_ON, S_COUNT_ITERATION, S_LAYERS, S_PARAM_PTRS, S_PARAM_HINT, S_PAUSED, S_SAMPLE_EVERY, S_ITERATION_SAMPLED,
    S_PAUSED_EXPLICIT, S_N
};
static const char *slot_names[S_N] = {
    "depth", "pending", "auto_name", "t_exit", "t", "merged", "merges", "slow", "extras",
    "updated", "started", "stack", "excl", "enters", "parent", "passthrough", "env_self", "env_ids", "steps",
    "_mem_left", "kinds", "forward_names", "env_width", "blocks", "block_t", "act_return", "seen_modules",
    "profiler_enabled", "saved_depth", "iteration_t", "iteration_steps", "iteration_excl", "memory", "mem_on",
    "rf_on", "count_iteration", "layers", "param_ptrs", "param_hint", "paused", "sample_every", "iteration_sampled",
    "paused_explicit",
};
/* Attributor.extras when memory marks are the only extra on (attribution.MEMORY_ONLY) */
#define MEMORY_ONLY 2
/* attribution.MEMORY_FIRST, MEMORY_EVERY, MEMORY_SPARSE: the iterations with memory marks (attribution.memory_marked;
 * exported: a test compares them) */
#define MEMORY_FIRST 2
#define MEMORY_EVERY 32
#define MEMORY_SPARSE 1024
/* attribution.SAMPLE_FROM: iterations before this index are always attributed; from it on, one in
 * Attributor.sample_every, chosen by sampled_index() (attribution.iteration_sampled is its twin; a test compares them) */
#define SAMPLE_FROM 512

/* roles and phase kinds (attribution.py), skips (autohooks.py) */
enum { ENV = 0, UPDATE = 1, INFER = 2, NEST = 3 };
enum { AUTO = 0, STICKY = 1, EXPLICIT = 2, ACTING = 3 };
enum { SKIP_CAST = 1, SKIP_NO_DATA = 2 };
/* env batches: not an env, a reset (no steps), one step, a vector env's num_envs, what batch_fn(env) says */
enum { NOT_ENV = -1, BATCH_NONE = 0, BATCH_ONE = 1, BATCH_VECTOR = 2, BATCH_CALL = 3 };
/* grad-mode marks (autohooks._install_grad_modes): torch.no_grad/inference_mode's __enter__ and __exit__ */
enum { NOT_MARK = 0, MARK_ENTER = 1, MARK_EXIT = 2 };
/* a library's label (libraries.label_wrapper): an explicit phase around the call; LABEL_ITERATION: one that starts a
 * training iteration (a collector's rollout) */
enum { LABEL = 3, LABEL_ITERATION = 4 };
/* a copy or lerp into tensors (autohooks._install_target_updates): nested or from another thread it passes through
 * here; at top level the Python wrapper decides whether it writes a watched module's parameters */
enum { MARK_INTO = 5 };

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *dict;
    PyObject *weakrefs;     /* torch keeps weak references to some of what it wraps (torch.compile's registries) */
    PyObject *a;            /* the Attributor */
    PyObject *fn;           /* what is wrapped */
    PyObject *fallback;     /* the Python wrapper this stands for */
    PyObject *name;         /* the phase */
    PyObject *layer;
    PyObject *role_obj;
    PyObject *clock;
    PyObject *grad_enabled; /* torch.is_grad_enabled for a module call, else None */
    PyObject *batch_fn;     /* BATCH_CALL: the agent steps one call of this env takes, batch_fn(env) */
    PyObject *paths;        /* parent path -> this phase's path under it (shared with the Python wrapper) */
    PyObject *path_under;   /* fills paths for a parent not seen yet */
    PyObject *dtype;        /* SKIP_CAST: torch.dtype */
    PyObject *tensor_cls;   /* SKIP_NO_DATA: torch.Tensor */
    PyObject *shape_like;   /* SKIP_NO_DATA: (int, torch.Size) */
    PyObject *forward;      /* a module call: the training forward's name (attribution.FORWARD), else None */
    PyObject *target;       /* a module call: the Event whose phase a no_grad call in the update opens (train/target) */
    PyObject *forward_ev;   /* a module call: the Event whose phase a grad-enabled call opens (train/forward) */
    PyObject *foreign;      /* what a call from another thread than `thread` runs: the hook's thread router
                             * (threads.Router: that thread's own hook), or None: the wrapped callable */
    unsigned long thread;
    int role, skip, model, batch, direct_clock;
    int mark; /* a grad-mode mark: name and layer are then the phases a block's end extends (ACT, TARGET); or a label */
    long memory_marks; /* attribution.MEMORY_MARKS: marks around a top-level phase's first occurrences */
    double gap;
    Py_ssize_t off[S_N];
#ifdef RLBENCH_HOOK_TIMING
    unsigned long long own_ticks, calls, top_calls, to_python; /* see hook timing below */
#endif
} Event;

static PyObject *str_enter, *str_exit, *str_device, *str_num_envs, *str_batch_size, *str_shape, *str_empty, *zero, *one;
static PyObject *str_call_impl, *str_compiled_call_impl, *str_inference, *str_data_ptr;
/* Event.model: not a module call, nn.Module.__call__, or torch's own _wrapped_call_impl (whose two cases a nested call
 * runs directly: one Python frame fewer) */
enum { NOT_MODEL = 0, MODEL = 1, MODEL_WRAPPED_CALL_IMPL = 2 };

#define SLOT(e, i) (*(PyObject **)((char *)(e)->a + (e)->off[i]))

/* Hook timing: a measuring build (CPPFLAGS=-DRLBENCH_HOOK_TIMING, see rlbench.suites.scripts.hook_time) counts, per
 * hook, its calls, those at top level, those that went to Python (to its Python wrapper, or with a call of the Python
 * attributor), and the ticks spent in its own code: from its entry to its return, less the call it wraps (where its
 * nested hooks count as their own) and less the Python wrapper's run (the attributor calls it makes go uncounted
 * there; those the compiled hook makes count as its own). The ordinary build has none of this. */
#ifdef RLBENCH_HOOK_TIMING
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static inline unsigned long long ticks(void) { return __rdtsc(); }
#else
static inline unsigned long long ticks(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}
#endif
#define TIMING_LEVELS 256
static unsigned long long seg_start[TIMING_LEVELS], child_ticks[TIMING_LEVELS], own_total;
static int level;
static PyObject *timed_registry; /* weak references to every Event made */

static PyObject *
call_untimed(PyObject *f, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    int l = level < TIMING_LEVELS ? level : TIMING_LEVELS - 1;
    own_total += ticks() - seg_start[l];
    PyObject *out = PyObject_Vectorcall(f, args, nargsf, kwnames);
    seg_start[l] = ticks();
    return out;
}
#define CALL_WRAPPED(f, args, nargsf, kwnames) call_untimed((f), (args), (nargsf), (kwnames))
#define CALL_FALLBACK(e, args, nargsf, kwnames) ((e)->to_python++, call_untimed((e)->fallback, (args), (nargsf), (kwnames)))
#define TO_PYTHON(e) ((e)->to_python++) /* a call of the Python attributor (its time stays the hook's own) */
#else
#define CALL_WRAPPED(f, args, nargsf, kwnames) PyObject_Vectorcall((f), (args), (nargsf), (kwnames))
#define CALL_FALLBACK(e, args, nargsf, kwnames) PyObject_Vectorcall((e)->fallback, (args), (nargsf), (kwnames))
#define TO_PYTHON(e) ((void)0)
#endif

static inline int
truth(PyObject *v)
{
    if (v == Py_True || v == one) return 1;
    if (v == Py_False || v == zero || v == Py_None || v == NULL) return 0;
    return PyObject_IsTrue(v) > 0;
}

static inline void
set_slot(Event *e, int i, PyObject *v) /* steals v */
{
    PyObject **p = &SLOT(e, i);
    PyObject *old = *p;
    *p = v;
    Py_XDECREF(old);
}

static inline int
set_double(Event *e, int i, double x)
{
    PyObject *old = SLOT(e, i);
    if (PyFloat_CheckExact(old) && Py_REFCNT(old) == 1) { /* the slot holds the only reference: nobody sees it change */
        ((PyFloatObject *)old)->ob_fval = x; /* PyFloat_AS_DOUBLE is no lvalue from Python 3.12 */
        return 0;
    }
    PyObject *v = PyFloat_FromDouble(x);
    if (v == NULL) return -1;
    set_slot(e, i, v);
    return 0;
}

static inline int
add_long(Event *e, int i, long n)
{
    PyObject *v = PyLong_FromLong(PyLong_AsLong(SLOT(e, i)) + n);
    if (v == NULL) return -1;
    set_slot(e, i, v);
    return 0;
}

static inline double
as_double(PyObject *v)
{
    return PyFloat_CheckExact(v) ? PyFloat_AS_DOUBLE(v) : PyFloat_AsDouble(v);
}

/* d[key] = v, v stolen (NULL: its constructor failed) */
static int
dict_put(PyObject *d, PyObject *key, PyObject *v)
{
    if (v == NULL) return -1;
    int r = PyDict_SetItem(d, key, v);
    Py_DECREF(v);
    return r;
}

/* d[key] += x, for the float and the int dicts (a missing key counts as 0, as in the defaultdicts) */
static int
dict_add_double(PyObject *d, PyObject *key, double x)
{
    PyObject *old = PyDict_GetItemWithError(d, key);
    if (old == NULL && PyErr_Occurred()) return -1;
    if (old != NULL && PyFloat_CheckExact(old) && Py_REFCNT(old) == 1) { /* the dict's alone (no snapshot shares it) */
        ((PyFloatObject *)old)->ob_fval += x;
        return 0;
    }
    return dict_put(d, key, PyFloat_FromDouble((old ? as_double(old) : 0.0) + x));
}

static int
dict_add_long(PyObject *d, PyObject *key, long n)
{
    PyObject *old = PyDict_GetItemWithError(d, key);
    if (old == NULL && PyErr_Occurred()) return -1;
    return dict_put(d, key, PyLong_FromLong((old ? PyLong_AsLong(old) : 0) + n));
}

/* the attributor's clock (Attributor.clock); an error is set where it raised */
static double
read_clock(Event *e)
{
    if (e->direct_clock) { /* time.perf_counter without the call: CLOCK_MONOTONIC, converted as CPython converts it */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        long long ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
        return ns % 1000000000LL == 0 ? (double)(ns / 1000000000LL) : (double)ns / 1e9;
    }
    PyObject *t = PyObject_CallNoArgs(e->clock);
    if (t == NULL) return -1.0;
    double x = as_double(t);
    Py_DECREF(t);
    return x;
}

/* the skip tests of autohooks.event_wrapper: calls that are not events */
static int
skipped(Event *e, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (e->skip == SKIP_CAST) {
        if (kwnames) {
            Py_ssize_t n = PyTuple_GET_SIZE(kwnames);
            for (Py_ssize_t i = 0; i < n; i++) {
                int eq = PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, i), str_device);
                if (eq == 0) return 0;
            }
        }
        return nargs < 2 || PyObject_TypeCheck(args[1], (PyTypeObject *)e->dtype);
    }
    if (nargs < 2 || args[0] != e->tensor_cls) return 1;
    int r = PyObject_IsInstance(args[1], e->shape_like);
    if (r < 0) {
        PyErr_Clear();
        return 0;
    }
    return r;
}

/* after the wrapped call and the bookkeeping that follows it: the call's own exception as it was, else `out`, unless
 * that bookkeeping raised */
static int pause_stack(Event *e);

static PyObject *
call_outcome(PyObject *out, PyObject *type, PyObject *value, PyObject *tb)
{
    if (type != NULL) {
        PyErr_Clear();
        PyErr_Restore(type, value, tb);
    }
    else if (PyErr_Occurred()) {
        Py_CLEAR(out);
    }
    return out;
}

/* a call from another thread than the attributor's: its own hook, through the router (threads.Router), or the wrapped
 * callable where there is none */
static inline PyObject *
foreign_call(Event *e, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    return CALL_WRAPPED(e->foreign != Py_None ? e->foreign : e->fn, args, nargsf, kwnames);
}

/* an event that starts a cycle: in a thread that has stepped no env, the first event after an update that is not one
 * (the learner's next queue get, replay sample or forward) starts its next training iteration
 * (Attributor.cycle_due): the Python wrapper runs it */
static inline int
cycle_due(Event *e)
{
    return e->role != UPDATE && SLOT(e, S_UPDATED) == Py_True && !truth(SLOT(e, S_ENV_WIDTH));
}

/* the `finally:` of the Python wrapper: end the phase this call opened or continued (lazily) */
static PyObject *
finish(Event *e, PyObject *out)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (truth(SLOT(e, S_SLOW))) {
        TO_PYTHON(e);
        PyObject *r = PyObject_CallMethodNoArgs(e->a, str_exit);
        Py_XDECREF(r);
    }
    else if (SLOT(e, S_PAUSED) == Py_True) { /* the env step that began an iteration left unattributed */
        if (pause_stack(e) < 0) PyErr_WriteUnraisable(e->a);
    }
    else {
        set_slot(e, S_DEPTH, Py_NewRef(zero));
        double t = read_clock(e);
        if (!PyErr_Occurred()) set_double(e, S_T_EXIT, t);
        set_slot(e, S_PENDING, Py_NewRef(Py_True));
    }
    return call_outcome(out, type, value, tb);
}

/* the path of a phase opened under `parent` (a new reference): from the paths cache, or Attributor._path_under */
static PyObject *
path_under(Event *e, PyObject *parent)
{
    PyObject *path = PyDict_GetItemWithError(e->paths, parent);
    if (path != NULL) return Py_NewRef(path);
    if (PyErr_Occurred()) return NULL;
    return PyObject_CallOneArg(e->path_under, parent);
}

/* the phase on top closes at `end` and phase e->name takes its place on the stack from `now` (the gap between goes to
 * the parent): Attributor._pop and _push without their calls and list resizing */
static int
replace_top(Event *e, double end, double now)
{
    PyObject *stack = SLOT(e, S_STACK);
    Py_ssize_t n = PyList_GET_SIZE(stack);
    PyObject *excl = SLOT(e, S_EXCL);
    PyObject *old = PyList_GET_ITEM(stack, n - 1);
    if (dict_add_double(excl, old, end - as_double(SLOT(e, S_T))) < 0) return -1;
    long merged = PyLong_AsLong(SLOT(e, S_MERGED));
    if (merged) {
        if (add_long(e, S_MERGES, merged) < 0) return -1;
        set_slot(e, S_MERGED, Py_NewRef(zero));
    }
    if (dict_add_long(SLOT(e, S_ENTERS), old, merged + 1) < 0) return -1;
    PyObject *parent = SLOT(e, S_PARENT);
    if (dict_add_double(excl, parent, now - end) < 0) return -1;
    if (set_double(e, S_T, now) < 0) return -1;
    PyObject *path = path_under(e, parent);
    if (path == NULL) return -1;
    PyList_SetItem(stack, n - 1, path); /* steals path */
    if (e->role == UPDATE) set_slot(e, S_UPDATED, Py_NewRef(Py_True));
    set_slot(e, S_AUTO_NAME, Py_NewRef(e->name));
    return 0;
}

/* the common transition, inline: the pending phase closes at its t_exit and this one takes its place on the stack */
static int
transition(Event *e, double now)
{
    double t_exit = as_double(SLOT(e, S_T_EXIT));
    set_slot(e, S_PENDING, Py_NewRef(Py_False));
    set_slot(e, S_DEPTH, Py_NewRef(one));
    return replace_top(e, t_exit, now);
}

/* whether the phase on top of the stack is the sticky training forward, with nothing pending above it */
static int
forward_on_top(Event *e)
{
    if (truth(SLOT(e, S_PENDING))) return 0;
    PyObject *kinds = SLOT(e, S_KINDS);
    Py_ssize_t n = PyList_GET_SIZE(kinds);
    return n > 0 && PyLong_AsLong(PyList_GET_ITEM(kinds, n - 1)) == STICKY;
}

/* Attributor.enter with the training forward on top and nothing pending, for a call that is not an env's and opens
 * no top-level phase (where memory marks act): the forward closes now and this phase takes its place. A transfer
 * (role NEST) is handled by the caller: it is part of the forward and opens nothing. 1: done; 0: not this case */
static int
leave_forward(Event *e, double now)
{
    if (e->role == ENV) return 0;
    PyObject *extras = SLOT(e, S_EXTRAS);
    if (truth(extras) && !(PyLong_CheckExact(extras) && PyLong_AsLong(extras) == MEMORY_ONLY &&
                           PyList_GET_SIZE(SLOT(e, S_STACK)) > 1))
        return 0;
    set_slot(e, S_DEPTH, Py_NewRef(one));
    if (replace_top(e, now, now) < 0) return -1;
    PyObject *kinds = SLOT(e, S_KINDS);
    PyList_SetItem(kinds, PyList_GET_SIZE(kinds) - 1, Py_NewRef(zero)); /* AUTO */
    return 1;
}

static int inline_ok(Event *e);
static int iteration_due(Event *e);
static int env_iteration(Event *e);
static int start_iteration(Event *e, double now);
static int after_iteration(Event *e);

/* the kind of the frame on top of the stack (attribution.AUTO ...), -1 for an empty stack */
static long
top_kind(Event *e)
{
    PyObject *kinds = SLOT(e, S_KINDS);
    Py_ssize_t n = PyList_GET_SIZE(kinds);
    return n > 0 ? PyLong_AsLong(PyList_GET_ITEM(kinds, n - 1)) : -1;
}

/* Attributor.enter with acting on top and nothing pending, for an env step that starts no iteration (or an inference
 * call that is not a module's): acting closes now (Attributor._close_acting without its split, which only a call that
 * ends the rollout makes) and this phase takes its place, where no memory mark is due. 1: done; 0: not this case */
static int
leave_acting(Event *e, double now)
{
    if (e->role != ENV && e->role != INFER) return 0;
    int iteration = env_iteration(e);
    if (iteration < 0) return -1;
    if (iteration == 2) return 0;
    if (e->role == INFER) { /* _close_acting(split=True) splits where the policy's last call returned before now */
        double last = as_double(SLOT(e, S_ACT_RETURN));
        if (as_double(SLOT(e, S_T)) <= last && last < now) return 0;
    }
    int ok = inline_ok(e);
    if (ok <= 0) return ok;
    set_slot(e, S_DEPTH, Py_NewRef(one));
    if (replace_top(e, now, now) < 0 || (iteration && (start_iteration(e, now) < 0 || after_iteration(e) < 0))) return -1;
    PyObject *kinds = SLOT(e, S_KINDS);
    PyList_SetItem(kinds, PyList_GET_SIZE(kinds) - 1, Py_NewRef(zero)); /* AUTO */
    return 1;
}

/* Attributor.enter_forward's pass-through: a module called with grad enabled while the training forward it would
 * open is already open (the loss computation's second, third, ... module call) */
static int
in_forward(Event *e)
{
    if (e->forward == Py_None || truth(SLOT(e, S_FORWARD_NAMES)) || !forward_on_top(e)) return 0;
    PyObject *stack = SLOT(e, S_STACK);
    Py_ssize_t n = PyList_GET_SIZE(stack);
    if (n == 0) return 0;
    Py_ssize_t r = PyUnicode_Tailmatch(PyList_GET_ITEM(stack, n - 1), e->forward, 0, PY_SSIZE_T_MAX, 1);
    return r < 0 ? -1 : (int)r;
}

/* fn called inside the phase on top, which it does not end (depth 1 during the call, as in the Python wrapper) */
static PyObject *
call_inside(Event *e, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    set_slot(e, S_DEPTH, Py_NewRef(one));
    PyObject *out = CALL_WRAPPED(e->fn, args, nargsf, kwnames);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    set_slot(e, S_DEPTH, Py_NewRef(zero));
    PyErr_Restore(type, value, tb);
    return out;
}

/* whether a memory mark is still due around top-level phase `path` in this iteration (Attributor._mem_left) */
static int
mark_due(Event *e, PyObject *path)
{
    PyObject *left = PyDict_GetItemWithError(SLOT(e, S_MEM_LEFT), path);
    if (left == NULL) return PyErr_Occurred() ? -1 : e->memory_marks > 0;
    return PyLong_AsLong(left) > 0;
}

/* whether the inline transition may replace the pending phase: no extra is on, or memory marks alone are and none
 * is due (they act only on top-level phases: Attributor._push_extras and _pop_extras), as the Python path would */
static int
inline_ok(Event *e)
{
    PyObject *extras = SLOT(e, S_EXTRAS);
    if (!truth(extras)) return 1;
    if (!PyLong_CheckExact(extras) || PyLong_AsLong(extras) != MEMORY_ONLY) return 0;
    PyObject *stack = SLOT(e, S_STACK);
    if (PyList_GET_SIZE(stack) > 1) return 1;
    int old_due = mark_due(e, PyList_GET_ITEM(stack, 0));
    if (old_due != 0) return old_due < 0 ? -1 : 0;
    PyObject *parent = SLOT(e, S_PARENT);
    PyObject *path = path_under(e, parent); /* this phase's path (the one the push would take) */
    if (path == NULL) return -1;
    int new_due = mark_due(e, path);
    Py_DECREF(path);
    return new_due < 0 ? -1 : !new_due;
}

/* for an event that may start a training iteration (an env step, a collector's labelled rollout): whether it starts
 * one (Attributor.enter, open_explicit: the first, or one after an update) that this file may start inline
 * (start_iteration). 0: no iteration to start; 1: one, inline; 2: one, but Attributor._new_iteration's other cases
 * apply (the first iteration, an extra on or due: memory marks, op counting, a trace or torch profiler ranges, or the
 * slow path), so the Python path runs it; -1: error */
static int
iteration_due(Event *e)
{
    int first = SLOT(e, S_STARTED) == Py_None;
    if (!first && !truth(SLOT(e, S_UPDATED))) return 0;
    if (first || truth(SLOT(e, S_SLOW)) || truth(SLOT(e, S_EXTRAS))) return 2;
    Py_ssize_t index = PyList_GET_SIZE(SLOT(e, S_ITERATION_T));
    if (truth(SLOT(e, S_MEMORY)) &&
        (index < MEMORY_FIRST || index % (index < MEMORY_SPARSE ? MEMORY_EVERY : MEMORY_SPARSE) == 0))
        return 2;
    PyObject *counted = SLOT(e, S_COUNT_ITERATION);
    if (counted != Py_None) {
        Py_ssize_t c = PyLong_AsSsize_t(counted);
        if (c == -1 && PyErr_Occurred()) return -1;
        if (c == index) return 2;
    }
    PyObject *on = PyObject_CallNoArgs(SLOT(e, S_PROFILER_ENABLED));
    if (on == NULL) return -1;
    int rf = truth(on);
    Py_DECREF(on);
    return rf ? 2 : 1;
}

/* iteration_due for an env step; 0 for any other event */
static int
env_iteration(Event *e)
{
    return e->role == ENV ? iteration_due(e) : 0;
}

/* attribution.iteration_sampled: whether iteration `index` is attributed, where one in `every` is from SAMPLE_FROM on
 * (splitmix64 of the index: no state, the same answer wherever it is asked) */
static int
sampled_index(Py_ssize_t index, long every)
{
    if (every <= 1 || index < SAMPLE_FROM) return 1;
    unsigned long long x = (unsigned long long)index + 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return (x ^ (x >> 31)) % (unsigned long long)every == 0;
}

/* whether the iteration an env step or a collector's label is starting may be left unattributed: sampling is on and
 * the step or the label opens the only phase (no label or rlbench.phase around it, no grad-mode block open, no depth
 * saved but the label's own, no extra but memory marks, which only the iterations Python starts take) */
static int
may_pause(Event *e)
{
    Py_ssize_t saved = e->mark == LABEL_ITERATION ? 1 : 0;
    if (e->mark != LABEL_ITERATION && e->batch <= BATCH_NONE) return 0;
    long every = PyLong_AsLong(SLOT(e, S_SAMPLE_EVERY));
    if (every <= 1) return 0;
    return PyList_GET_SIZE(SLOT(e, S_STACK)) == 1 && PyList_GET_SIZE(SLOT(e, S_SAVED_DEPTH)) == saved &&
           !truth(SLOT(e, S_BLOCKS)) && !truth(SLOT(e, S_PAUSED_EXPLICIT)) && !truth(SLOT(e, S_SLOW)) &&
           (!truth(SLOT(e, S_EXTRAS)) || (PyLong_CheckExact(SLOT(e, S_EXTRAS)) &&
                                           PyLong_AsLong(SLOT(e, S_EXTRAS)) == MEMORY_ONLY)); /* (marks: not due) */
}

/* the env step that paused attribution has returned: its phase leaves the stack unbooked (the iteration is not
 * attributed: its time is the span between its mark and the next, Attributor.iteration_sampled says so) */
static int
pause_stack(Event *e)
{
    PyObject *stack = SLOT(e, S_STACK), *kinds = SLOT(e, S_KINDS);
    if (PyList_SetSlice(stack, 0, PyList_GET_SIZE(stack), NULL) < 0 ||
        PyList_SetSlice(kinds, 0, PyList_GET_SIZE(kinds), NULL) < 0)
        return -1;
    long merged = PyLong_AsLong(SLOT(e, S_MERGED));
    if (merged) {
        if (add_long(e, S_MERGES, merged) < 0) return -1;
        set_slot(e, S_MERGED, Py_NewRef(zero));
    }
    set_slot(e, S_PARENT, Py_NewRef(str_empty));
    set_slot(e, S_PENDING, Py_NewRef(Py_False));
    set_slot(e, S_DEPTH, Py_NewRef(zero));
    return 0;
}

/* attribution resumes at an iteration's first event (the stack is empty: pause_stack): the time since the pause is
 * booked nowhere */
static int
resume(Event *e)
{
    double now = read_clock(e);
    if (PyErr_Occurred()) return -1;
    set_slot(e, S_PAUSED, Py_NewRef(Py_False));
    return set_double(e, S_T, now);
}

/* attribution._pack: the exclusive times' values as C doubles, in the dict's key order (a new bytes object) */
static PyObject *
pack_excl(PyObject *excl)
{
    Py_ssize_t n = PyDict_GET_SIZE(excl), pos = 0, i = 0;
    PyObject *snap = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(double));
    if (snap == NULL) return NULL;
    double *out = (double *)PyBytes_AS_STRING(snap);
    PyObject *key, *value;
    while (i < n && PyDict_Next(excl, &pos, &key, &value)) {
        double x = as_double(value);
        if (x == -1.0 && PyErr_Occurred()) {
            Py_DECREF(snap);
            return NULL;
        }
        out[i++] = x;
    }
    return snap;
}

/* Attributor._new_iteration's common case (env_iteration said 1), once the time up to `now` is booked: the iteration's
 * start, its agent steps so far and a snapshot of the exclusive times, packed (pack_excl: no dict, and no float shared
 * with the running totals, which dict_add_double then keeps updating in place). No memory mark is due, nothing is
 * counted, no profiler runs: the extras stay off. (Attributor._cuda is read only by memory marks, whose iterations are
 * Python's: it is set there.) */
/* an iteration's mark (Attributor._new_iteration's lists): its start, the agent steps before it, the snapshot `snap`
 * (not stolen) and whether it is attributed */
static int
append_mark(Event *e, double now, PyObject *snap, int attributed)
{
    PyObject *t = PyFloat_FromDouble(now);
    int r = t == NULL ? -1 : PyList_Append(SLOT(e, S_ITERATION_T), t);
    Py_XDECREF(t);
    if (r == 0) r = PyList_Append(SLOT(e, S_ITERATION_STEPS), SLOT(e, S_STEPS));
    if (r == 0) r = PyList_Append(SLOT(e, S_ITERATION_EXCL), snap);
    if (r == 0) r = PyList_Append(SLOT(e, S_ITERATION_SAMPLED), attributed ? Py_True : Py_False);
    return r;
}

/* after an iteration started at `now` (start_iteration): its bookkeeping is the profiler's own, not the phase's that
 * starts it: that phase starts when it is done, and the time goes to the phase under it (Attributor._new_iteration's
 * callers do the same) */
static int
after_iteration(Event *e)
{
    double after = read_clock(e);
    if (PyErr_Occurred()) return -1;
    double t = as_double(SLOT(e, S_T));
    if (after <= t) return 0;
    if (dict_add_double(SLOT(e, S_EXCL), SLOT(e, S_PARENT), after - t) < 0) return -1;
    return set_double(e, S_T, after);
}

static int
start_iteration(Event *e, double now)
{
    PyObject *snap = pack_excl(SLOT(e, S_EXCL));
    if (snap == NULL) return -1;
    Py_ssize_t index = PyList_GET_SIZE(SLOT(e, S_ITERATION_T));
    int pause = may_pause(e) && !sampled_index(index, PyLong_AsLong(SLOT(e, S_SAMPLE_EVERY)));
    int r = append_mark(e, now, snap, !pause);
    Py_DECREF(snap);
    if (r < 0) return -1;
    if (pause) set_slot(e, S_PAUSED, Py_NewRef(Py_True)); /* the step runs, then pause_stack (finish) */
    set_slot(e, S_UPDATED, Py_NewRef(Py_False));
    set_slot(e, S_MEM_ON, Py_NewRef(Py_False));
    set_slot(e, S_RF_ON, Py_NewRef(Py_False));
    return 0;
}

/* Attributor._push without its extras: `path` (not stolen) opens under `top`, the phase on top, from `now`; the gap
 * since the last transition goes to `top`, and calls merged into it are counted */
static int
push_path(Event *e, PyObject *top, PyObject *path, PyObject *kind, double now)
{
    if (dict_add_double(SLOT(e, S_EXCL), top, now - as_double(SLOT(e, S_T))) < 0 || set_double(e, S_T, now) < 0)
        return -1;
    long merged = PyLong_AsLong(SLOT(e, S_MERGED));
    if (merged) {
        if (dict_add_long(SLOT(e, S_ENTERS), top, merged) < 0 || add_long(e, S_MERGES, merged) < 0) return -1;
        set_slot(e, S_MERGED, Py_NewRef(zero));
    }
    if (PyList_Append(SLOT(e, S_STACK), path) < 0 || PyList_Append(SLOT(e, S_KINDS), kind) < 0) return -1;
    set_slot(e, S_PARENT, Py_NewRef(top));
    return 0;
}

/* Attributor.enter with nothing pending and nothing to close: the stack is empty or an explicit phase is on top
 * (a library's label), and this phase is pushed on it (Attributor._push, from the open grad-mode block's start for
 * an inference call), where no memory mark is due and no other extra is on; an env step may start an iteration
 * (env_iteration). 1: done; 0: not this case */
static int
push_phase(Event *e, double now)
{
    long kind = top_kind(e);
    if (kind != -1 && kind != EXPLICIT) return 0;
    int iteration = env_iteration(e);
    if (iteration < 0) return -1;
    if (iteration == 2) return 0;
    PyObject *stack = SLOT(e, S_STACK);
    Py_ssize_t n = PyList_GET_SIZE(stack);
    PyObject *top = n > 0 ? PyList_GET_ITEM(stack, n - 1) : str_empty;
    PyObject *extras = SLOT(e, S_EXTRAS);
    int extra = truth(extras);
    if (extra && !(PyLong_CheckExact(extras) && PyLong_AsLong(extras) == MEMORY_ONLY)) return 0;
    PyObject *path = path_under(e, top);
    if (path == NULL) return -1;
    if (extra && n == 0) { /* a top-level phase: Attributor._push_extras marks memory while marks are due */
        int due = mark_due(e, path);
        if (due != 0) {
            Py_DECREF(path);
            return due < 0 ? -1 : 0;
        }
    }
    double t = as_double(SLOT(e, S_T));
    if (e->role == INFER) {
        double block_t = as_double(SLOT(e, S_BLOCK_T));
        if (block_t > t) now = block_t;
    }
    set_slot(e, S_DEPTH, Py_NewRef(one));
    int r = push_path(e, top, path, zero, now); /* AUTO */
    Py_DECREF(path);
    if (r < 0 || (iteration && (start_iteration(e, now) < 0 || after_iteration(e) < 0))) return -1;
    if (e->role == UPDATE) set_slot(e, S_UPDATED, Py_NewRef(Py_True));
    set_slot(e, S_AUTO_NAME, Py_NewRef(e->name));
    return 1;
}

/* an automatic phase opens (or continues) around fn; the caller did the pass-through test */
static PyObject *
timed(Event *e, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    double now = read_clock(e);
    if (PyErr_Occurred()) return NULL;
    int pending = truth(SLOT(e, S_PENDING));
    int same = 0, ok, iteration = 0;
    if (pending) {
        same = PyObject_RichCompareBool(SLOT(e, S_AUTO_NAME), e->name, Py_EQ);
        if (same < 0) return NULL;
    }
    if (same && !truth(SLOT(e, S_SLOW))) { /* (module calls, whose grad-mode blocks merge further, are Python's) */
        same = now - as_double(SLOT(e, S_T_EXIT)) < e->gap;
    }
    else {
        same = 0;
    }
    if (same) { /* the same kind again: one phase */
        set_slot(e, S_PENDING, Py_NewRef(Py_False));
        if (add_long(e, S_MERGED, 1) < 0) return NULL;
        set_slot(e, S_DEPTH, Py_NewRef(one));
    }
    else if (pending && PyList_GET_SIZE(SLOT(e, S_STACK)) > 0 && (iteration = env_iteration(e)) != 2 &&
             (iteration < 0 || (ok = inline_ok(e)) != 0)) {
        /* the pending phase closes at its t_exit, this one opens: an iteration it starts begins after that booking */
        if (iteration < 0 || ok < 0 || transition(e, now) < 0) return NULL;
        if (iteration && (start_iteration(e, now) < 0 || after_iteration(e) < 0)) return NULL;
    }
    else if (!pending && e->role != UPDATE && top_kind(e) == ACTING && !truth(SLOT(e, S_SLOW)) &&
             (e->role == NEST || (ok = leave_acting(e, now)) != 0)) {
        if (e->role == NEST) /* the action's conversion (or another transfer) while the policy acts: part of it */
            return call_inside(e, args, nargsf, kwnames);
        if (ok < 0) return NULL;
    }
    else if (!pending && forward_on_top(e) && (e->role == NEST || (ok = leave_forward(e, now)) != 0)) {
        if (e->role == NEST) /* a transfer inside the loss computation: part of the forward */
            return call_inside(e, args, nargsf, kwnames);
        if (ok < 0) return NULL;
    }
    else if (!pending && (ok = push_phase(e, now)) != 0) {
        if (ok < 0) return NULL;
    }
    else { /* everything else: Attributor.enter */
        PyObject *now_obj = PyFloat_FromDouble(now);
        if (now_obj == NULL) return NULL;
        PyObject *stack[5] = {e->a, e->name, e->layer, e->role_obj, now_obj};
        TO_PYTHON(e);
        PyObject *r = PyObject_VectorcallMethod(str_enter, stack, 5 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_DECREF(now_obj);
        if (r == NULL) return NULL;
        int opened = truth(r);
        Py_DECREF(r);
        if (!opened) /* a transfer inside the training forward: part of it */
            return call_inside(e, args, nargsf, kwnames);
    }
    return finish(e, CALL_WRAPPED(e->fn, args, nargsf, kwnames));
}


/* autohooks._install_grad_modes, line for line: the outermost block's __enter__ at depth 0 marks its time
 * (Attributor.block_enter); the outermost __exit__ extends a pending acting or target phase that opened inside the
 * block to the block's end (Attributor.block_exit). Nested blocks only count. */
static PyObject *
mark_call(Event *e, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (PyThread_get_thread_ident() != e->thread) return foreign_call(e, args, nargsf, kwnames);
    if (e->mark == MARK_ENTER) {
        if (!truth(SLOT(e, S_DEPTH))) {
            double now = read_clock(e);
            if (PyErr_Occurred()) return NULL;
            long blocks = PyLong_AsLong(SLOT(e, S_BLOCKS)) + 1;
            if (add_long(e, S_BLOCKS, 1) < 0) return NULL;
            if (blocks == 1 && set_double(e, S_BLOCK_T, now) < 0) return NULL;
        }
        return CALL_WRAPPED(e->fn, args, nargsf, kwnames);
    }
    PyObject *out = CALL_WRAPPED(e->fn, args, nargsf, kwnames);
    if (out == NULL) return NULL;
    if (truth(SLOT(e, S_DEPTH))) return out;
    long blocks = PyLong_AsLong(SLOT(e, S_BLOCKS));
    if (blocks == 0) return out;
    double now = read_clock(e);
    if (PyErr_Occurred()) goto fail;
    if (blocks > 1) {
        if (add_long(e, S_BLOCKS, -1) < 0) goto fail;
        return out;
    }
    set_slot(e, S_BLOCKS, Py_NewRef(zero));
    double block_t = as_double(SLOT(e, S_BLOCK_T));
    if (truth(SLOT(e, S_PENDING)) && as_double(SLOT(e, S_T)) >= block_t && block_t > 0.0) {
        PyObject *auto_name = SLOT(e, S_AUTO_NAME);
        int hit = PyObject_RichCompareBool(auto_name, e->name, Py_EQ);
        if (hit == 0) hit = PyObject_RichCompareBool(auto_name, e->layer, Py_EQ);
        if (hit < 0) goto fail;
        if (hit && set_double(e, S_T_EXIT, now) < 0) goto fail;
    }
    if (set_double(e, S_BLOCK_T, 0.0) < 0) goto fail;
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* autohooks.batch_width for the common inputs: a tensor or an array with a tuple shape (torch.Size is one), the rows
 * of args[1]; a TensorDict, its first batch dimension (1 for an unbatched one); -1 where the Python function must
 * decide (keywords, anything else) */
static long
simple_width(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (kwnames != NULL || nargs < 2) return -1;
    PyObject *x = args[1], *v;
    int found = _PyObject_LookupAttr(x, str_batch_size, &v);
    if (found != 0) { /* a TensorDict's batch_size (torch.Size); anything else, or an error: Python's */
        long width = -1;
        if (found > 0 && PyTuple_Check(v)) {
            Py_ssize_t n = PyTuple_GET_SIZE(v);
            if (n == 0) width = 1;
            else if (PyLong_CheckExact(PyTuple_GET_ITEM(v, 0))) width = PyLong_AsLong(PyTuple_GET_ITEM(v, 0));
        }
        Py_XDECREF(v);
        if (width < 0) PyErr_Clear();
        return width;
    }
    if (_PyObject_LookupAttr(x, str_shape, &v) <= 0) {
        PyErr_Clear();
        return -1;
    }
    long width = -1;
    if (PyTuple_Check(v)) {
        Py_ssize_t n = PyTuple_GET_SIZE(v);
        if (n == 1) width = 1;
        else if (n > 1 && PyLong_CheckExact(PyTuple_GET_ITEM(v, 0))) {
            width = PyLong_AsLong(PyTuple_GET_ITEM(v, 0));
            if (width == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                width = -1;
            }
        }
    }
    Py_DECREF(v);
    return width;
}


/* a module call that passes through: torch's _wrapped_call_impl, line for line, without its frame (its compiled
 * call where torch.compile set one, else the class's _call_impl), or the wrapped __call__ itself */
static PyObject *
module_passthrough(Event *e, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (e->model != MODEL_WRAPPED_CALL_IMPL || nargs < 1) return CALL_WRAPPED(e->fn, args, nargsf, kwnames);
    PyObject *self = args[0];
    PyObject *compiled = PyObject_GetAttr(self, str_compiled_call_impl);
    if (compiled == NULL) {
        PyErr_Clear();
        return CALL_WRAPPED(e->fn, args, nargsf, kwnames);
    }
    if (compiled != Py_None) {
        PyObject *out = CALL_WRAPPED(compiled, args + 1, nargs - 1, kwnames);
        Py_DECREF(compiled);
        return out;
    }
    Py_DECREF(compiled);
    PyObject *impl = _PyType_Lookup(Py_TYPE(self), str_call_impl); /* borrowed */
    if (impl == NULL || !PyFunction_Check(impl)) return CALL_WRAPPED(e->fn, args, nargsf, kwnames);
    Py_INCREF(impl);
    PyObject *out = CALL_WRAPPED(impl, args, nargsf, kwnames);
    Py_DECREF(impl);
    return out;
}

/* the env's width: the agent steps the last env step took (0 before any) */
static long
env_width(Event *e)
{
    PyObject *width = SLOT(e, S_ENV_WIDTH);
    return PyLong_CheckExact(width) ? PyLong_AsLong(width) : 0;
}

/* whether `module` was called at top level before (Attributor.seen_modules): a first call goes to the Python wrapper,
 * which watches its parameters */
static int
seen_module(Event *e, PyObject *module)
{
    PyObject *id = PyLong_FromVoidPtr(module);
    int seen = id == NULL ? -1 : PySet_Contains(SLOT(e, S_SEEN), id);
    Py_XDECREF(id);
    if (seen < 0) PyErr_Clear();
    return seen > 0;
}

/* autohooks._model_event's training forward, in C for its common case: a module called with grad enabled, not on the
 * env's batch, right after an automatic phase that is pending (the optimizer step before the next minibatch, the
 * target before the loss), or with nothing pending on an empty stack or under a library's label (SB3's `train`):
 * Attributor.enter_forward settles that phase and opens the sticky forward (the Event e->forward_ev), where no memory
 * mark is due. NULL with no error set: the Python wrapper decides. */
static PyObject *
forward_call(Event *e, long rows, long width, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (e->forward_ev == NULL || e->forward_ev == Py_None || truth(SLOT(e, S_FORWARD_NAMES))) return NULL;
    int pending = truth(SLOT(e, S_PENDING));
    long kind = top_kind(e);
    if (pending ? kind != AUTO : kind != -1 && kind != EXPLICIT) return NULL;
    if (rows < 0 || (width > 0 && rows == width) || !seen_module(e, args[0])) return NULL; /* acting, undecided: Python's */
    Event *f = (Event *)e->forward_ev;
    if (!pending) { /* the forward opens on an empty stack or inside a library's label (SB3's train): pushed */
        PyObject *stack = SLOT(e, S_STACK), *extras = SLOT(e, S_EXTRAS);
        Py_ssize_t n = PyList_GET_SIZE(stack);
        int extra = truth(extras);
        if (extra && !(PyLong_CheckExact(extras) && PyLong_AsLong(extras) == MEMORY_ONLY)) return NULL;
        PyObject *top = n > 0 ? PyList_GET_ITEM(stack, n - 1) : str_empty;
        PyObject *path = path_under(f, top);
        if (path == NULL) return NULL;
        int due = extra && n == 0 ? mark_due(f, path) : 0; /* a top-level phase marks memory while marks are due */
        if (due != 0) { /* due: Python's; an error is left set */
            Py_DECREF(path);
            return NULL;
        }
        double now = read_clock(e);
        int r = PyErr_Occurred() ? -1 : push_path(f, top, path, one, now); /* STICKY */
        Py_DECREF(path);
        if (r < 0) return NULL;
        return call_inside(e, args, nargsf, kwnames);
    }
    int ok = inline_ok(f);
    if (ok <= 0) return NULL;
    double now = read_clock(e);
    if (PyErr_Occurred()) return NULL;
    PyObject *auto_name = Py_NewRef(SLOT(e, S_AUTO_NAME)); /* enter_forward leaves it as it was */
    set_slot(e, S_PENDING, Py_NewRef(Py_False));
    set_slot(e, S_DEPTH, Py_NewRef(one));
    if (replace_top(f, as_double(SLOT(e, S_T_EXIT)), now) < 0) {
        Py_DECREF(auto_name);
        return NULL;
    }
    set_slot(e, S_AUTO_NAME, auto_name);
    PyObject *kinds = SLOT(e, S_KINDS);
    PyList_SetItem(kinds, PyList_GET_SIZE(kinds) - 1, Py_NewRef(one)); /* STICKY */
    return call_inside(e, args, nargsf, kwnames); /* the forward stays open (sticky) for the loss computation */
}

/* autohooks._model_event's acting, in C for its two common cases: a module called on the env's batch while the policy
 * is acting (the critic beside the actor: Attributor.enter_acting's pass-through), and the acting that follows a
 * pending automatic phase (the env step's conversions), where no memory mark is due. NULL with no error set: not one
 * of these cases, the Python wrapper decides. */
static PyObject *
acting_call(Event *e, long rows, long width, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (width <= 0 || rows != width || !seen_module(e, args[0])) return NULL;
    double now = read_clock(e);
    if (PyErr_Occurred()) return NULL;
    int pending = truth(SLOT(e, S_PENDING));
    long kind = top_kind(e);
    if (!pending && kind == ACTING) { /* the policy's next call: the same acting */
        if (add_long(e, S_PASSTHROUGH, 1) < 0) return NULL;
        set_slot(e, S_DEPTH, Py_NewRef(one));
    }
    else if (pending && kind == AUTO && !truth(SLOT(e, S_SLOW))) {
        int ok = inline_ok(e);
        if (ok <= 0) return NULL;
        /* Attributor._settle, then _push(ACT, ..., ACTING, start): the pending phase closes at its t_exit and acting
         * takes its place, from the open grad-mode block's start where there is one */
        double t_exit = as_double(SLOT(e, S_T_EXIT));
        double block_t = as_double(SLOT(e, S_BLOCK_T));
        set_slot(e, S_PENDING, Py_NewRef(Py_False));
        set_slot(e, S_DEPTH, Py_NewRef(one));
        if (replace_top(e, t_exit, block_t > t_exit ? block_t : now) < 0) return NULL;
        PyObject *kinds = SLOT(e, S_KINDS);
        PyObject *acting = PyLong_FromLong(ACTING);
        if (acting == NULL) return NULL;
        PyList_SetItem(kinds, PyList_GET_SIZE(kinds) - 1, acting);
    }
    else {
        return NULL;
    }
    PyObject *out = CALL_WRAPPED(e->fn, args, nargsf, kwnames);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    set_slot(e, S_DEPTH, Py_NewRef(zero));
    double t = read_clock(e);
    if (!PyErr_Occurred()) set_double(e, S_ACT_RETURN, t);
    return call_outcome(out, type, value, tb);
}

/* autohooks._model_event's target, in C for its common case: a module called under no_grad, not on the env's batch,
 * with nothing pending and nothing on the stack (the TD target after the replay sample) or a library's label on top
 * that is not an advantage (SB3's `train`), opens train/target (the Event e->target), as Attributor.enter would; with
 * train/target pending, the next such call continues it (a merge); with another automatic phase pending (SAC's
 * alpha loss after the actor's optimizer step), that phase closes and the target opens. NULL with no error set: the
 * Python wrapper decides. */
static PyObject *
target_call(Event *e, long rows, long width, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (e->target == NULL || e->target == Py_None || truth(SLOT(e, S_SLOW))) return NULL;
    if (truth(SLOT(e, S_PENDING))) { /* the target's next call (SAC's second critic, the next action's log-pi) */
        if (width <= 0 || rows < 0 || rows == width || !seen_module(e, args[0])) return NULL;
        Event *t = (Event *)e->target;
        int same = PyObject_RichCompareBool(SLOT(e, S_AUTO_NAME), t->name, Py_EQ);
        if (same < 0) return NULL;
        double now = read_clock(e);
        if (PyErr_Occurred()) return NULL;
        /* Attributor.enter merges it into the pending train/target: within the merge gap, or anywhere inside the
         * grad-mode block that target opened in */
        double block_t = as_double(SLOT(e, S_BLOCK_T)), t_exit = as_double(SLOT(e, S_T_EXIT));
        if (same && (now - t_exit < t->gap || (as_double(SLOT(e, S_T)) >= block_t && block_t > 0.0))) {
            set_slot(e, S_PENDING, Py_NewRef(Py_False));
            if (add_long(e, S_MERGED, 1) < 0) return NULL;
            set_slot(e, S_DEPTH, Py_NewRef(one));
            return finish(t, CALL_WRAPPED(e->fn, args, nargsf, kwnames));
        }
        /* else the pending phase closes at its t_exit and the target opens, from the open grad-mode block's start if
         * that came after (SAC's alpha loss: the log-pi under no_grad right after the actor's optimizer step) */
        PyObject *kinds = SLOT(e, S_KINDS);
        Py_ssize_t n = PyList_GET_SIZE(kinds);
        if (n == 0 || PyLong_AsLong(PyList_GET_ITEM(kinds, n - 1)) != AUTO) return NULL;
        if (n > 1) {
            long below = PyLong_AsLong(PyList_GET_ITEM(kinds, n - 2));
            if (below >= STICKY && below != EXPLICIT) return NULL; /* (a sticky phase under it: Python's) */
        }
        int ok = inline_ok(t);
        if (ok <= 0) return NULL;
        if (transition(t, block_t > t_exit ? block_t : now) < 0) return NULL;
        return finish(t, CALL_WRAPPED(e->fn, args, nargsf, kwnames));
    }
    long kind = top_kind(e);
    if (kind != -1 && kind != EXPLICIT) return NULL;
    if (kind == EXPLICIT) { /* inside a labelled advantage (TorchRL's GAE calling the value network): inference */
        PyObject *stack = SLOT(e, S_STACK);
        PyObject *layer = PyDict_GetItemWithError(SLOT(e, S_LAYERS), PyList_GET_ITEM(stack, PyList_GET_SIZE(stack) - 1));
        if (layer == NULL && PyErr_Occurred()) return NULL;
        if (layer == NULL || !PyUnicode_Check(layer) || PyUnicode_CompareWithASCIIString(layer, "advantage") == 0)
            return NULL;
    }
    if (width <= 0 || rows < 0 || rows == width || !seen_module(e, args[0])) return NULL;
    Event *t = (Event *)e->target;
    double now = read_clock(e);
    if (PyErr_Occurred()) return NULL;
    int ok = push_phase(t, now);
    if (ok <= 0) return NULL;
    return finish(t, CALL_WRAPPED(e->fn, args, nargsf, kwnames));
}


/* Attributor._pop without its extras: the phase on top closes at `now` (the caller checked that no memory mark is
 * due: a pop that empties the stack marks while marks are due) */
static int
pop_phase(Event *e, double now)
{
    PyObject *stack = SLOT(e, S_STACK), *kinds = SLOT(e, S_KINDS);
    Py_ssize_t n = PyList_GET_SIZE(stack);
    PyObject *path = Py_NewRef(PyList_GET_ITEM(stack, n - 1));
    int r = -1;
    if (PyList_SetSlice(stack, n - 1, n, NULL) < 0 ||
        PyList_SetSlice(kinds, PyList_GET_SIZE(kinds) - 1, PyList_GET_SIZE(kinds), NULL) < 0)
        goto done;
    set_slot(e, S_PARENT, Py_NewRef(n > 2 ? PyList_GET_ITEM(stack, n - 3) : str_empty));
    if (dict_add_double(SLOT(e, S_EXCL), path, now - as_double(SLOT(e, S_T))) < 0 || set_double(e, S_T, now) < 0)
        goto done;
    long merged = PyLong_AsLong(SLOT(e, S_MERGED));
    if (merged) {
        if (add_long(e, S_MERGES, merged) < 0) goto done;
        set_slot(e, S_MERGED, Py_NewRef(zero));
    }
    r = dict_add_long(SLOT(e, S_ENTERS), path, merged + 1);
done:
    Py_DECREF(path);
    return r;
}

/* whether popping the phase on top, at stack depth n, needs no memory mark (extras are off or memory-only, and the
 * pop leaves phases below it or finds no mark due): 1 yes, 0 no, -1 error */
static int
pop_ok(Event *e)
{
    PyObject *extras = SLOT(e, S_EXTRAS);
    if (!truth(extras)) return 1;
    if (!PyLong_CheckExact(extras) || PyLong_AsLong(extras) != MEMORY_ONLY) return 0;
    PyObject *stack = SLOT(e, S_STACK);
    if (PyList_GET_SIZE(stack) > 1) return 1;
    int due = mark_due(e, PyList_GET_ITEM(stack, 0));
    return due < 0 ? -1 : !due;
}

/* libraries.label_wrapper with Attributor.open_explicit and close_explicit, in C for the common case: nothing to
 * settle but a pending automatic phase, no sticky phase to close but the training forward, no iteration to start, no
 * profiler ranges and no memory mark due. Anything else, at either end, goes to the attributor's own methods. */
static PyObject *
label_call(Event *e, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (PyThread_get_thread_ident() != e->thread) return foreign_call(e, args, nargsf, kwnames);
    if (e->mark == LABEL && cycle_due(e)) return CALL_FALLBACK(e, args, nargsf, kwnames);
    PyObject *stack = SLOT(e, S_STACK);
    Py_ssize_t n = PyList_GET_SIZE(stack);
    if (n > 0) { /* already inside this label (a collector's iterator calling its rollout) */
        PyObject *top = PyList_GET_ITEM(stack, n - 1);
        int same = PyUnicode_Compare(top, e->name) == 0;
        if (!same) {
            Py_ssize_t r = PyUnicode_Tailmatch(top, e->name, 0, PY_SSIZE_T_MAX, 1);
            if (r < 0) return NULL;
            /* endswith("/" + name) */
            if (r && PyUnicode_GET_LENGTH(top) > PyUnicode_GET_LENGTH(e->name)) {
                Py_UCS4 c = PyUnicode_ReadChar(top, PyUnicode_GET_LENGTH(top) - PyUnicode_GET_LENGTH(e->name) - 1);
                same = c == '/';
            }
        }
        if (same) return CALL_WRAPPED(e->fn, args, nargsf, kwnames);
    }
    int fast = 1;
    double now = read_clock(e);
    if (PyErr_Occurred()) return NULL;
    PyObject *extras = SLOT(e, S_EXTRAS);
    if (truth(extras) && !(PyLong_CheckExact(extras) && PyLong_AsLong(extras) == MEMORY_ONLY)) fast = 0;
    int iteration = 0; /* a collector's rollout that starts an iteration: inline in its common case */
    if (fast && e->mark == LABEL_ITERATION) {
        iteration = iteration_due(e);
        if (iteration < 0) return NULL;
        if (iteration == 2) fast = 0;
    }
    if (fast && iteration != 1) { /* (iteration_due has found the profiler off) */
        PyObject *pe = SLOT(e, S_PROFILER_ENABLED);
        if (pe != Py_None) {
            PyObject *on = PyObject_CallNoArgs(pe);
            if (on == NULL) return NULL;
            fast = on == Py_False;
            Py_DECREF(on);
        }
    }
    /* the state after _settle and _close_sticky: at most a pending phase and a training forward come off */
    int pending = truth(SLOT(e, S_PENDING));
    long kind = top_kind(e);
    if (fast) {
        /* a pop that empties the stack marks memory while marks are due for its phase (Attributor._pop_extras) */
        int last_due = n == 1 && truth(extras) ? mark_due(e, PyList_GET_ITEM(stack, 0)) : 0;
        if (last_due < 0) return NULL;
        if (pending) { /* what _settle pops, then what lies under it */
            if (kind != AUTO || last_due) fast = 0;
            else kind = n > 1 ? PyLong_AsLong(PyList_GET_ITEM(SLOT(e, S_KINDS), n - 2)) : -1;
            if (fast && n > 1 && kind == STICKY) fast = 0; /* two pops: Python's */
        }
        if (kind == ACTING || (kind == STICKY && last_due)) fast = 0;
        if (kind == AUTO && !pending) fast = 0;
    }
    if (fast && truth(extras)) { /* memory-only: the push of a top-level phase marks while marks are due */
        Py_ssize_t left = n - (pending ? 1 : 0) - (kind == STICKY ? 1 : 0);
        if (left == 0) {
            PyObject *path = path_under(e, str_empty);
            if (path == NULL) return NULL;
            int due = mark_due(e, path);
            Py_DECREF(path);
            if (due < 0) return NULL;
            if (due) fast = 0;
        }
    }
    if (fast) {
        if (pending) {
            set_slot(e, S_PENDING, Py_NewRef(Py_False));
            if (pop_phase(e, as_double(SLOT(e, S_T_EXIT))) < 0) return NULL;
        }
        if (kind == STICKY && pop_phase(e, now) < 0) return NULL;
        PyObject *depth = SLOT(e, S_DEPTH);
        if (PyList_Append(SLOT(e, S_SAVED_DEPTH), depth) < 0) return NULL;
        set_slot(e, S_DEPTH, Py_NewRef(zero));
        stack = SLOT(e, S_STACK);
        n = PyList_GET_SIZE(stack);
        PyObject *top = n > 0 ? PyList_GET_ITEM(stack, n - 1) : str_empty;
        PyObject *path = path_under(e, top);
        if (path == NULL) return NULL;
        PyObject *explicit_kind = PyLong_FromLong(EXPLICIT);
        int r = explicit_kind == NULL ? -1 : push_path(e, top, path, explicit_kind, now);
        Py_DECREF(path);
        Py_XDECREF(explicit_kind);
        /* the snapshot after the push holds what open_explicit's _new_iteration took before it: the push booked the
         * time up to now to the phase below and nothing to the new one */
        if (r < 0 || (iteration && (start_iteration(e, now) < 0 || after_iteration(e) < 0))) return NULL;
    }
    else {
        TO_PYTHON(e);
        PyObject *r = PyObject_CallMethod(e->a, "open_explicit", "OOO", e->name, e->layer,
                                          e->mark == LABEL_ITERATION ? Py_True : Py_False);
        if (r == NULL) return NULL;
        Py_DECREF(r);
    }
    PyObject *out = CALL_WRAPPED(e->fn, args, nargsf, kwnames);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (SLOT(e, S_PAUSED) == Py_True) { /* this rollout began an iteration left unattributed: its label leaves the
                                        * stack unbooked, and the depth saved at its start comes back */
        PyObject *saved = SLOT(e, S_SAVED_DEPTH);
        Py_ssize_t k = PyList_GET_SIZE(saved);
        PyObject *depth = Py_NewRef(k > 0 ? PyList_GET_ITEM(saved, k - 1) : zero);
        if (pause_stack(e) < 0 || (k > 0 && PyList_SetSlice(saved, k - 1, k, NULL) < 0))
            PyErr_WriteUnraisable(e->a);
        set_slot(e, S_DEPTH, depth);
        if (type != NULL) PyErr_Restore(type, value, tb);
        return out;
    }
    /* close_explicit: fast when the explicit phase is on top with nothing pending, or under one pending phase */
    int closed = 0;
    now = read_clock(e);
    if (!PyErr_Occurred()) {
        stack = SLOT(e, S_STACK);
        n = PyList_GET_SIZE(stack);
        pending = truth(SLOT(e, S_PENDING));
        kind = top_kind(e);
        int ok = n > 0, acting = 0;
        if (ok && pending) ok = kind == AUTO && n > 1 && PyLong_AsLong(PyList_GET_ITEM(SLOT(e, S_KINDS), n - 2)) == EXPLICIT;
        else if (ok && kind == ACTING) { /* acting left open inside a labelled inference (SB3's predict) ends with it,
                                          * whole (close_explicit: no advantage split) */
            ok = n > 1 && PyLong_AsLong(PyList_GET_ITEM(SLOT(e, S_KINDS), n - 2)) == EXPLICIT;
            if (ok) {
                PyObject *layer = PyDict_GetItemWithError(SLOT(e, S_LAYERS), PyList_GET_ITEM(stack, n - 2));
                ok = layer != NULL && PyUnicode_Check(layer) && PyUnicode_Compare(layer, str_inference) == 0;
            }
            acting = ok;
        }
        else if (ok) ok = kind == EXPLICIT;
        if (ok) ok = pop_ok(e) == 1 && (n - (pending || acting ? 1 : 0) > 1 || !truth(SLOT(e, S_EXTRAS)) ||
                                         mark_due(e, PyList_GET_ITEM(stack, 0)) == 0);
        PyErr_Clear();
        if (ok) {
            if (pending) {
                set_slot(e, S_PENDING, Py_NewRef(Py_False));
                ok = pop_phase(e, as_double(SLOT(e, S_T_EXIT))) == 0;
            }
            else if (acting) {
                ok = pop_phase(e, now) == 0;
            }
            if (ok && pop_phase(e, now) == 0) {
                PyObject *saved = SLOT(e, S_SAVED_DEPTH);
                Py_ssize_t k = PyList_GET_SIZE(saved);
                if (k > 0) {
                    set_slot(e, S_DEPTH, Py_NewRef(PyList_GET_ITEM(saved, k - 1)));
                    PyList_SetSlice(saved, k - 1, k, NULL);
                }
                else {
                    set_slot(e, S_DEPTH, Py_NewRef(zero));
                }
                closed = 1;
            }
        }
    }
    PyErr_Clear();
    if (!closed) {
        TO_PYTHON(e);
        PyObject *r = PyObject_CallMethod(e->a, "close_explicit", NULL);
        if (r == NULL) { /* an error in the wrapper's `finally` replaces the call's outcome, as in Python */
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
            Py_XDECREF(out);
            return NULL;
        }
        Py_DECREF(r);
    }
    if (type != NULL) PyErr_Restore(type, value, tb);
    return out;
}

/* a copy or lerp into a tensor at top level (autohooks._install_target_updates' op, its common cases): one that writes
 * no watched module's parameters passes through; a copy into one while a phase is pending opens the target update
 * (e->name, role UPDATE) or, the loop's next copy, continues it; the rest (nothing pending, the _foreach_ forms, an
 * extra on) is the Python wrapper's */
static PyObject *
into_call(Event *e, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *ptrs = SLOT(e, S_PARAM_PTRS);
    if (PyVectorcall_NARGS(nargsf) < 1 || !PyAnySet_Check(ptrs) || PyList_Check(args[0]) || PyTuple_Check(args[0]))
        return CALL_FALLBACK(e, args, nargsf, kwnames);
    if (PySet_GET_SIZE(ptrs) == 0) return CALL_WRAPPED(e->fn, args, nargsf, kwnames);
    PyObject *ptr = PyObject_CallMethodNoArgs(args[0], str_data_ptr);
    int watched = ptr == NULL ? -1 : PySet_Contains(ptrs, ptr);
    Py_XDECREF(ptr);
    if (watched <= 0) { /* (a tensor without data: not a parameter's copy) */
        PyErr_Clear();
        return CALL_WRAPPED(e->fn, args, nargsf, kwnames);
    }
    if (!truth(SLOT(e, S_PENDING)) || truth(SLOT(e, S_SLOW)) || PyList_GET_SIZE(SLOT(e, S_STACK)) == 0)
        return CALL_FALLBACK(e, args, nargsf, kwnames);
    int same = PyObject_RichCompareBool(SLOT(e, S_AUTO_NAME), e->name, Py_EQ);
    if (same < 0) return NULL;
    if (same) { /* the loop's next copy: the same target update, whatever ran between (its arithmetic) */
        set_slot(e, S_PENDING, Py_NewRef(Py_False));
        if (add_long(e, S_MERGED, 1) < 0) return NULL;
        set_slot(e, S_DEPTH, Py_NewRef(one));
    }
    else { /* the loop's first copy (Attributor.enter): the pending phase closes at its t_exit, the target update
            * opens where the loop listed the modules' parameters (param_hint), if that came after */
        int ok = inline_ok(e);
        if (ok <= 0) return ok < 0 ? NULL : CALL_FALLBACK(e, args, nargsf, kwnames);
        double now = read_clock(e);
        if (PyErr_Occurred()) return NULL;
        double t_exit = as_double(SLOT(e, S_T_EXIT)), hint = as_double(SLOT(e, S_PARAM_HINT));
        if (transition(e, hint > t_exit ? hint : now) < 0) return NULL;
    }
    return finish(e, CALL_WRAPPED(e->fn, args, nargsf, kwnames)); /* depth 0, t_exit now, pending again */
}

/* after an env step: the agent steps it took (an iteration boundary it made snapshots the steps before it), and the
 * width a module call's batch has when it is acting */
static int
count_steps(Event *e, PyObject *env)
{
    long steps = 1;
    if (e->batch >= BATCH_VECTOR) {
        PyObject *n = e->batch == BATCH_VECTOR ? PyObject_GetAttr(env, str_num_envs) : PyObject_CallOneArg(e->batch_fn, env);
        if (n == NULL) return -1;
        steps = PyLong_AsLong(n);
        Py_DECREF(n);
        if (steps == -1 && PyErr_Occurred()) return -1;
    }
    if (add_long(e, S_STEPS, steps) < 0) return -1;
    if (PyLong_CheckExact(SLOT(e, S_ENV_WIDTH)) && PyLong_AsLong(SLOT(e, S_ENV_WIDTH)) == steps) return 0;
    PyObject *width = PyLong_FromLong(steps); /* a module call on a batch this wide is acting */
    if (width == NULL) return -1;
    set_slot(e, S_ENV_WIDTH, width);
    return 0;
}

#ifdef RLBENCH_HOOK_TIMING
#define EVENT_CALL event_dispatch
#else
#define EVENT_CALL event_call
#endif

static PyObject *EVENT_CALL(Event *e, PyObject *const *args, size_t nargsf, PyObject *kwnames);

/* a hooked call at top level while the iteration is not attributed (Attributor.paused): it passes through, and only
 * what finds iterations runs: an update sets `updated`, an env step counts its agent steps and, after an update,
 * starts the next iteration, unattributed (its mark reuses the snapshot of the pause: nothing was booked since) or,
 * where sampled_index picks it or iteration_due needs Python, attributed again from its start. A collector's
 * labelled rollout resumes attribution (labels never pause it). */
/* while paused, an env step or a collector's rollout after an update starts an iteration: 1 when it stays
 * unattributed (its mark is appended, reusing the pause's snapshot: nothing was booked since), 0 when attribution
 * resumes (sampled_index picks it, or iteration_due needs Python: the caller runs the event as usual), -1 error */
static int
paused_iteration(Event *e)
{
    PyObject *snaps = SLOT(e, S_ITERATION_EXCL);
    Py_ssize_t index = PyList_GET_SIZE(SLOT(e, S_ITERATION_T)), k = PyList_GET_SIZE(snaps);
    int due = sampled_index(index, PyLong_AsLong(SLOT(e, S_SAMPLE_EVERY))) ? 2 : iteration_due(e);
    if (due < 0) return -1;
    if (k == 0) due = 2; /* (no snapshot to reuse: cannot happen, a pause takes one) */
    else if (truth(SLOT(e, S_PAUSED_EXPLICIT))) due = 1; /* inside an rlbench.phase opened while paused */
    if (due == 2) return resume(e) < 0 ? -1 : 0;
    double now = read_clock(e);
    if (PyErr_Occurred() || append_mark(e, now, PyList_GET_ITEM(snaps, k - 1), 0) < 0) return -1;
    set_slot(e, S_UPDATED, Py_NewRef(Py_False));
    return 1;
}

static PyObject *
paused_call(Event *e, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (e->mark == LABEL_ITERATION) { /* a collector's rollout: inside one (its iterator calling it), it passes */
        int unattributed = truth(SLOT(e, S_UPDATED)) ? paused_iteration(e) : 1;
        if (unattributed < 0) return NULL;
        return unattributed ? CALL_WRAPPED(e->fn, args, nargsf, kwnames) : EVENT_CALL(e, args, nargsf, kwnames);
    }
    if (e->mark) return CALL_WRAPPED(e->fn, args, nargsf, kwnames); /* a grad-mode mark, a label, a copy */
    if (e->model) return module_passthrough(e, args, nargsf, kwnames);
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (e->batch <= BATCH_NONE || nargs < 1) {
        if (e->role == UPDATE) set_slot(e, S_UPDATED, Py_NewRef(Py_True));
        return CALL_WRAPPED(e->fn, args, nargsf, kwnames);
    }
    if (truth(SLOT(e, S_UPDATED))) { /* this env step starts an iteration */
        int unattributed = paused_iteration(e);
        if (unattributed < 0) return NULL;
        if (!unattributed) return EVENT_CALL(e, args, nargsf, kwnames);
    }
    PyObject *out = CALL_WRAPPED(e->fn, args, nargsf, kwnames);
    if (out != NULL && count_steps(e, args[0]) < 0) Py_CLEAR(out);
    return out;
}

static PyObject *
EVENT_CALL(Event *e, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (PyThread_get_thread_ident() != e->thread) return foreign_call(e, args, nargsf, kwnames);
    if (SLOT(e, S_PAUSED) == Py_True && !truth(SLOT(e, S_DEPTH))) return paused_call(e, args, nargsf, kwnames);
    if (e->mark == MARK_INTO) {
        if (truth(SLOT(e, S_DEPTH))) return CALL_WRAPPED(e->fn, args, nargsf, kwnames);
        return into_call(e, args, nargsf, kwnames);
    }
    if (e->mark >= LABEL) return label_call(e, args, nargsf, kwnames);
    if (e->mark) return mark_call(e, args, nargsf, kwnames);
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    int depth = truth(SLOT(e, S_DEPTH));
    if (depth) {
        if (e->model) /* a nested module call costs what an unprofiled one costs: not counted */
            return module_passthrough(e, args, nargsf, kwnames);
        if (e->batch != NOT_ENV && depth && nargs > 0) {
            PyObject *outer = SLOT(e, S_ENV_SELF);
            if (outer != Py_None && outer != args[0]) /* an inner env: the Python wrapper shadows it */
                return CALL_FALLBACK(e, args, nargsf, kwnames);
        }
        goto passthrough;
    }
    if (e->skip && skipped(e, args, nargs, kwnames)) goto passthrough;
    if (e->batch == NOT_ENV && cycle_due(e)) return CALL_FALLBACK(e, args, nargsf, kwnames);
    if (e->model) {
        PyObject *ge = PyObject_CallNoArgs(e->grad_enabled);
        if (ge == NULL) return NULL;
        Py_DECREF(ge);
        if (ge == Py_True) { /* the training forward's next call, while it is open: inside it */
            int inside = in_forward(e);
            if (inside < 0) return NULL;
            if (inside) {
                if (add_long(e, S_PASSTHROUGH, 1) < 0) return NULL;
                return call_inside(e, args, nargsf, kwnames);
            }
        }
        /* the batch's width against the env's (autohooks.batch_width), read once for the cases below */
        long rows = simple_width(args, nargs, kwnames), width = env_width(e);
        if (ge == Py_True) {
            PyObject *out = forward_call(e, rows, width, args, nargsf, kwnames);
            if (out != NULL || PyErr_Occurred()) return out;
        }
        /* acting's common cases here; everything else is decided by the Python wrapper: acting's other cases, a
         * target, the forward's first call (autohooks._model_event: the batch's width against the env's) */
        PyObject *out = acting_call(e, rows, width, args, nargsf, kwnames);
        if (out != NULL || PyErr_Occurred()) return out;
        if (ge != Py_True) {
            out = target_call(e, rows, width, args, nargsf, kwnames);
            if (out != NULL || PyErr_Occurred()) return out;
        }
        return CALL_FALLBACK(e, args, nargsf, kwnames);
    }
    if (e->batch == NOT_ENV) return timed(e, args, nargsf, kwnames);
    if (nargs < 1) return CALL_FALLBACK(e, args, nargsf, kwnames);
    PyObject *env = args[0];
    int known = PyDict_Contains(SLOT(e, S_ENV_IDS), (PyObject *)Py_TYPE(env));
    if (known <= 0) { /* an env class seen for the first time: the Python wrapper registers it */
        if (known < 0) return NULL;
        return CALL_FALLBACK(e, args, nargsf, kwnames);
    }
    set_slot(e, S_ENV_SELF, Py_NewRef(env));
    PyObject *out = timed(e, args, nargsf, kwnames);
    set_slot(e, S_ENV_SELF, Py_NewRef(Py_None));
    if (out == NULL || e->batch == BATCH_NONE) return out;
    if (count_steps(e, env) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
passthrough:
    if (add_long(e, S_PASSTHROUGH, 1) < 0) return NULL;
    return CALL_WRAPPED(e->fn, args, nargsf, kwnames);
}

#ifdef RLBENCH_HOOK_TIMING
/* the hook, timed: its own ticks are its whole run less the calls it makes (CALL_WRAPPED, CALL_FALLBACK) and less the
 * own ticks of the hooks nested in them, which are theirs */
static PyObject *
event_call(Event *e, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    int l = ++level < TIMING_LEVELS ? level : TIMING_LEVELS - 1;
    unsigned long long before = own_total;
    e->calls++;
    if (level == 1) e->top_calls++;
    child_ticks[l] = 0;
    seg_start[l] = ticks();
    PyObject *out = event_dispatch(e, args, nargsf, kwnames);
    own_total += ticks() - seg_start[l];
    unsigned long long whole = own_total - before;
    e->own_ticks += whole - child_ticks[l];
    level--;
    if (level > 0) child_ticks[level < TIMING_LEVELS ? level : TIMING_LEVELS - 1] += whole;
    return out;
}

static PyObject *
timing_ticks(PyObject *self, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(ticks());
}

/* every live Event, with its counts: [(event, own ticks, calls, top-level calls, calls that went to Python: the
 * Python wrapper or the Python attributor)] */
static PyObject *
timing_table(PyObject *self, PyObject *unused)
{
    PyObject *rows = PyList_New(0);
    if (rows == NULL) return NULL;
    Py_ssize_t n = timed_registry ? PyList_GET_SIZE(timed_registry) : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *ev = PyWeakref_GetObject(PyList_GET_ITEM(timed_registry, i)); /* borrowed; None once gone */
        if (ev == Py_None) continue;
        Event *e = (Event *)ev;
        PyObject *row = Py_BuildValue("(OKKKK)", ev, e->own_ticks, e->calls, e->top_calls, e->to_python);
        if (row == NULL || PyList_Append(rows, row) < 0) {
            Py_XDECREF(row);
            Py_DECREF(rows);
            return NULL;
        }
        Py_DECREF(row);
    }
    return rows;
}

#endif

static PyObject *
iteration_sampled(PyObject *self, PyObject *args)
{
    Py_ssize_t index;
    long every;
    if (!PyArg_ParseTuple(args, "nl", &index, &every)) return NULL;
    return PyBool_FromLong(sampled_index(index, every));
}

static PyMethodDef module_methods[] = {
    {"iteration_sampled", iteration_sampled, METH_VARARGS,
     "iteration_sampled(index, every): whether the compiled hooks attribute iteration `index` (attribution.py's twin)."},
#ifdef RLBENCH_HOOK_TIMING
    {"ticks", timing_ticks, METH_NOARGS, "The timing clock's count now (rdtsc on x86, else CLOCK_MONOTONIC ns)."},
    {"timing_table", timing_table, METH_NOARGS,
     "[(event, own ticks, calls, top-level calls, calls into the Python wrapper or attributor)] for every live Event."},
#endif
    {NULL},
};

static PyObject *
event_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"attributor", "fn", "fallback", "name", "layer", "role", "clock", "thread", "paths",
                             "path_under", "gap", "skip", "model", "batch", "grad_enabled", "dtype", "tensor_cls",
                             "shape_like", "direct_clock", "batch_fn", "memory_marks", "forward", "mark", "target", "forward_event",
                             "foreign", NULL};
    PyObject *a, *fn, *fallback, *name, *layer, *role_obj, *clock, *thread, *paths, *path_under;
    PyObject *grad_enabled = Py_None, *dtype = Py_None, *tensor_cls = Py_None, *shape_like = Py_None;
    PyObject *batch_fn = Py_None, *forward = Py_None, *target = Py_None, *forward_ev = Py_None, *foreign = Py_None;
    long memory_marks = 8;
    double gap;
    int skip = 0, model = 0, batch = NOT_ENV, direct = 0, mark = NOT_MARK;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOUUOOOO!Od|iiiOOOOpOlOiOOO", kwlist, &a, &fn, &fallback, &name, &layer,
                                     &role_obj, &clock, &thread, &PyDict_Type, &paths, &path_under, &gap, &skip,
                                     &model, &batch, &grad_enabled, &dtype, &tensor_cls, &shape_like, &direct,
                                     &batch_fn, &memory_marks, &forward, &mark, &target, &forward_ev, &foreign))
        return NULL;
    Event *e = (Event *)type->tp_alloc(type, 0);
    if (e == NULL) return NULL;
    e->a = Py_NewRef(a);
    e->vectorcall = (vectorcallfunc)event_call;
    e->role = (int)PyLong_AsLong(role_obj);
    e->thread = PyLong_AsUnsignedLong(thread);
    if (PyErr_Occurred()) goto error;
    e->gap = gap;
    e->skip = skip;
    e->model = model;
    e->batch = batch;
    e->direct_clock = direct;
    e->memory_marks = memory_marks;
    e->mark = mark;
    if ((model && grad_enabled == Py_None) || (forward != Py_None && !PyUnicode_Check(forward)) ||
        (skip == SKIP_CAST && !PyType_Check(dtype)) ||
        (skip == SKIP_NO_DATA && (tensor_cls == Py_None || shape_like == Py_None)) ||
        (batch == BATCH_CALL && !PyCallable_Check(batch_fn)) || mark < NOT_MARK || mark > MARK_INTO ||
        (foreign != Py_None && !PyCallable_Check(foreign)) ||
        (mark && (model || skip || batch != NOT_ENV)) ||
        (target != Py_None && (!model || !PyObject_TypeCheck(target, type) || ((Event *)target)->a != a)) ||
        (forward_ev != Py_None && (!model || !PyObject_TypeCheck(forward_ev, type) || ((Event *)forward_ev)->a != a ||
                                   ((Event *)forward_ev)->role == UPDATE || ((Event *)forward_ev)->role == ENV)) ||
        model < NOT_MODEL || model > MODEL_WRAPPED_CALL_IMPL) {
        PyErr_SetString(PyExc_ValueError, "Event: a module call needs grad_enabled, a skip needs its types, "
                                          "BATCH_CALL a batch_fn; forward is a str; a mark is 1 or 2 and nothing else; "
                                          "a target or forward_event is a module call's, an Event of the same attributor "
                                          "(the forward's of a role that is not an update's or an env's); model is 0-2");
        goto error;
    }
    PyTypeObject *cls = Py_TYPE(a);
    for (int i = 0; i < S_N; i++) { /* each slot's offset, from its member descriptor */
        PyObject *d = PyObject_GetAttrString((PyObject *)cls, slot_names[i]);
        if (d == NULL) goto error;
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        if (ok) e->off[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!ok || SLOT(e, i) == NULL) {
            PyErr_Format(PyExc_TypeError, "Event: %s.%s is not a set __slots__ attribute", cls->tp_name, slot_names[i]);
            goto error;
        }
    }
    if (!PyList_Check(SLOT(e, S_STACK)) || !PyList_Check(SLOT(e, S_KINDS)) || !PyDict_Check(SLOT(e, S_EXCL)) ||
        !PyDict_Check(SLOT(e, S_ENTERS)) || !PyDict_Check(SLOT(e, S_ENV_IDS)) || !PyDict_Check(SLOT(e, S_MEM_LEFT))) {
        PyErr_SetString(PyExc_TypeError,
                        "Event: the attributor's stack, kinds, excl, enters, env_ids and _mem_left must be lists and dicts");
        goto error;
    }
    e->fn = Py_NewRef(fn);
    e->fallback = Py_NewRef(fallback);
    e->name = Py_NewRef(name);
    e->layer = Py_NewRef(layer);
    e->role_obj = Py_NewRef(role_obj);
    e->clock = Py_NewRef(clock);
    e->paths = Py_NewRef(paths);
    e->path_under = Py_NewRef(path_under);
    e->grad_enabled = Py_NewRef(grad_enabled);
    e->dtype = Py_NewRef(dtype);
    e->tensor_cls = Py_NewRef(tensor_cls);
    e->shape_like = Py_NewRef(shape_like);
    e->batch_fn = Py_NewRef(batch_fn);
    e->forward = Py_NewRef(forward);
    e->target = Py_NewRef(target);
    e->forward_ev = Py_NewRef(forward_ev);
    e->foreign = Py_NewRef(foreign);
#ifdef RLBENCH_HOOK_TIMING
    PyObject *ref = PyWeakref_NewRef((PyObject *)e, NULL);
    if (ref == NULL || PyList_Append(timed_registry, ref) < 0) {
        Py_XDECREF(ref);
        goto error;
    }
    Py_DECREF(ref);
#endif
    return (PyObject *)e;
error:
    Py_DECREF(e);
    return NULL;
}

static int
event_traverse(Event *e, visitproc visit, void *arg)
{
    Py_VISIT(e->dict);
    Py_VISIT(e->a);
    Py_VISIT(e->fn);
    Py_VISIT(e->fallback);
    Py_VISIT(e->clock);
    Py_VISIT(e->paths);
    Py_VISIT(e->path_under);
    Py_VISIT(e->grad_enabled);
    Py_VISIT(e->dtype);
    Py_VISIT(e->tensor_cls); /* Tensor.__new__'s hook, on torch.Tensor itself, refers back to it */
    Py_VISIT(e->shape_like);
    Py_VISIT(e->batch_fn);
    Py_VISIT(e->target);
    Py_VISIT(e->forward_ev);
    Py_VISIT(e->foreign);
    return 0;
}

static int
event_clear(Event *e)
{
    Py_CLEAR(e->dict);
    Py_CLEAR(e->a);
    Py_CLEAR(e->fn);
    Py_CLEAR(e->fallback);
    Py_CLEAR(e->name);
    Py_CLEAR(e->layer);
    Py_CLEAR(e->role_obj);
    Py_CLEAR(e->clock);
    Py_CLEAR(e->paths);
    Py_CLEAR(e->path_under);
    Py_CLEAR(e->grad_enabled);
    Py_CLEAR(e->dtype);
    Py_CLEAR(e->tensor_cls);
    Py_CLEAR(e->shape_like);
    Py_CLEAR(e->batch_fn);
    Py_CLEAR(e->forward);
    Py_CLEAR(e->target);
    Py_CLEAR(e->forward_ev);
    Py_CLEAR(e->foreign);
    return 0;
}

static void
event_dealloc(Event *e)
{
    PyObject_GC_UnTrack(e);
    if (e->weakrefs != NULL) PyObject_ClearWeakRefs((PyObject *)e);
    event_clear(e);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

/* bound like a Python function: a method on a class, itself on the class */
static PyObject *
event_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *
event_repr(Event *e)
{
    return PyUnicode_FromFormat("<rlbench hook %R around %R>", e->name, e->fn);
}

/* the hook as a builtin function: for Tensor.__new__, which torch.compile's polyfill registry accepts only as a
 * function (a builtin counts), checked when torch._dynamo is first imported, often inside the profile */
static PyObject *
event_fastcall(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    return event_call((Event *)self, args, (size_t)nargs, kwnames);
}

static PyMethodDef builtin_def = {
    "rlbench_hook", (PyCFunction)(void (*)(void))event_fastcall, METH_FASTCALL | METH_KEYWORDS,
    "A hooked callable (rlbench.profiling._fastevent.Event) as a builtin function.",
};

static PyObject *
event_as_function(PyObject *self, PyObject *unused)
{
    return PyCFunction_NewEx(&builtin_def, self, NULL);
}

static PyMethodDef event_methods[] = {
    {"as_function", event_as_function, METH_NOARGS, "This hook as a builtin function (types.BuiltinFunctionType)."},
    {NULL},
};

static PyGetSetDef event_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

static PyTypeObject EventType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rlbench.profiling._fastevent.Event",
    .tp_basicsize = sizeof(Event),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "A hooked callable: the hot path of rlbench.profiling.autohooks.event_wrapper and env_wrapper, in C.",
    .tp_new = event_new,
    .tp_dealloc = (destructor)event_dealloc,
    .tp_traverse = (traverseproc)event_traverse,
    .tp_clear = (inquiry)event_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Event, vectorcall),
    .tp_descr_get = event_get,
    .tp_dictoffset = offsetof(Event, dict),
    .tp_weaklistoffset = offsetof(Event, weakrefs),
    .tp_getset = event_getset,
    .tp_methods = event_methods,
    .tp_repr = (reprfunc)event_repr,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "rlbench.profiling._fastevent",
    .m_doc = "The profiler's hot path in C (see rlbench.profiling.autohooks; the Python wrappers are the reference).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__fastevent(void)
{
    if (PyType_Ready(&EventType) < 0) return NULL;
    str_enter = PyUnicode_InternFromString("enter");
    str_exit = PyUnicode_InternFromString("exit");
    str_device = PyUnicode_InternFromString("device");
    str_num_envs = PyUnicode_InternFromString("num_envs");
    str_batch_size = PyUnicode_InternFromString("batch_size");
    str_shape = PyUnicode_InternFromString("shape");
    str_empty = PyUnicode_InternFromString("");
    str_call_impl = PyUnicode_InternFromString("_call_impl");
    str_compiled_call_impl = PyUnicode_InternFromString("_compiled_call_impl");
    str_inference = PyUnicode_InternFromString("inference");
    str_data_ptr = PyUnicode_InternFromString("data_ptr");
    zero = PyLong_FromLong(0);
    one = PyLong_FromLong(1);
    if (!str_enter || !str_exit || !str_device || !str_num_envs || !str_batch_size || !str_shape || !str_empty ||
        !str_call_impl || !str_compiled_call_impl || !str_inference || !str_data_ptr || !zero || !one)
        return NULL;
#ifdef RLBENCH_HOOK_TIMING
    if (timed_registry == NULL && (timed_registry = PyList_New(0)) == NULL) return NULL;
#endif
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "MEMORY_ONLY", MEMORY_ONLY) < 0 ||
        PyModule_AddIntConstant(m, "MEMORY_FIRST", MEMORY_FIRST) < 0 ||
        PyModule_AddIntConstant(m, "MEMORY_EVERY", MEMORY_EVERY) < 0 ||
        PyModule_AddIntConstant(m, "MEMORY_SPARSE", MEMORY_SPARSE) < 0 ||
        PyModule_AddIntConstant(m, "SAMPLE_FROM", SAMPLE_FROM) < 0 ||
        PyModule_AddObjectRef(m, "Event", (PyObject *)&EventType) < 0 ||
#ifdef RLBENCH_HOOK_TIMING
        PyModule_AddIntConstant(m, "HOOK_TIMING", 1) < 0 ||
#endif
        0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
