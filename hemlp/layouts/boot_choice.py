"""layout="auto" with bootstrap=True: layouts (A) and (P), each with its own bootstrap placement, compared by the
planner's estimate *including the bootstraps*, among those whose evaluation keys fit the key-memory limit.

Each candidate is planned as compile(..., layout=that, bootstrap=True) would plan it
(hemlp.layouts.batch_bootstrap.plan_bootstrapped, hemlp.layouts.packed_bootstrap.plan_packed_bootstrapped: the same
placement DP on the same level DAG, each node priced with that layout's unit costs), and its estimate() is the one
the plan prints: layers + placed bootstraps (+ layout (P)'s diagonals encoded per run), seconds per batch on one
thread. Layout (A) refreshes one ciphertext per feature and chunk, layout (P) one packed ciphertext per value and
group of samples, with sparse bootstraps of the packed period's slots: a single image of a conv net bootstraps a
handful of ciphertexts in (P) against hundreds in (A); a large batch fills (A)'s slots and (P) runs many groups.

Keys: the evaluation keys in memory (relinearisation, layout (P)'s rotation keys, and the bootstrapping keys of the
planned pipeline, estimated from the parameters before any key exists) must fit MAX_BOOT_EVAL_KEY_BYTES, the budget
the bootstrap lowering already plans batched keys within (hemlp.planner.bootstrap_lowering.MAX_BATCH_KEY_BYTES).
Layout (A′) is not compared: it refreshes its activation segments (hemlp.layouts.mlwe_bootstrap) when asked for by
layout="mlwe". Encrypted weights (layout (C)) are another
kind of plan: compile plans them alone (hemlp.layouts.blocked_bootstrap), never against (A) / (P).
"""
from __future__ import annotations

from hemlp.bootstrap.batch_keys import estimate_bytes
from hemlp.bootstrap.params import PRESET_DEPTHS, BootParams
from hemlp.compiler.params import step_cost
from hemlp.fhe import Params
from hemlp.errors import EncodingError, LevelError, ResourceError, ShapeError, UnsupportedError
from hemlp.layouts import batch_bootstrap, check_memory, choose, get
from hemlp.layouts.base import Layout
from hemlp.layouts.batch import Batch
from hemlp.layouts.batch_bootstrap import single_key_bytes
from hemlp.layouts.packed import Packed
from hemlp.layouts.blocked_bootstrap import plan_blocked_bootstrapped
from hemlp.layouts.mlwe_bootstrap import plan_mlwe_bootstrapped
from hemlp.layouts.packed_bootstrap import plan_packed_bootstrapped
from hemlp.planner.bootstrap_lowering import MAX_BATCH_KEY_BYTES
from hemlp.planner.resources import estimate_resources
from hemlp.runtime import streamed

__all__ = ["MAX_BOOT_EVAL_KEY_BYTES", "single_key_bytes", "boot_key_bytes", "eval_key_bytes", "memory_bytes",
           "server_bytes", "batch_memory_floor", "choose_bootstrapped", "BOOTSTRAPPED", "plan_with_bootstraps"]

#: the evaluation keys (bootstrapping keys included) a bootstrapped plan may hold for "auto" to choose it
MAX_BOOT_EVAL_KEY_BYTES = MAX_BATCH_KEY_BYTES
GIB = 2.0 ** 30


def boot_key_bytes(lay: Layout) -> int:
    """The bootstrapping keys a planned layout's keygen() makes, in memory (0 without bootstraps): single CtS-first
    keys for the program's bootstrap slots (layout (P): its sparse period), or the S2C-first batch keys of size k."""
    steps = batch_bootstrap.bootstrap_steps(lay.steps)
    if not steps:
        return 0
    params = lay.params
    if batch_bootstrap.boot_order(lay.steps) == "s2c_first":
        cts_d, stc_d = PRESET_DEPTHS[params.name]
        s2c = BootParams(order="s2c_first", log_message_ratio=batch_bootstrap.S2C_LOG_MESSAGE_RATIO,
                         cts_depth=cts_d, stc_depth=stc_d)
        return int(estimate_bytes(params, batch_bootstrap.boot_batch_size(lay.steps), s2c))
    slots = getattr(lay.program, "boot_slots", None) or params.N // 2
    return single_key_bytes(params, slots)


def memory_bytes(lay: Layout) -> tuple[int, int]:
    """(server memory, evaluation keys) of a planned layout, bootstrapping keys included in both: one resource
    estimate."""
    r, boot = estimate_resources(lay), boot_key_bytes(lay)
    return int(r.server_memory_bytes) + boot, int(r.eval_key_bytes) + boot


def eval_key_bytes(lay: Layout) -> int:
    """All of a planned layout's evaluation keys in memory: relinearisation and rotation keys (the resource
    estimate) plus its bootstrapping keys."""
    return memory_bytes(lay)[1]


def server_bytes(lay: Layout) -> int:
    """A planned layout's estimated server memory with its bootstrapping keys."""
    return memory_bytes(lay)[0]


def batch_memory_floor(steps, N: int, chunks: int) -> tuple[int, str]:
    """(bytes, why): a lower bound of layout (A)'s server memory estimate under any bootstrap placement, from the
    lowered steps alone, so that "auto" can pass over layout (A) before planning its bootstraps. An activation
    that no streamed chain covers (hemlp.runtime.streamed.find_chains; inserting bootstraps only adds
    single-reader steps, so it covers no more) holds its input, read at no fewer levels than it consumes, and its
    output at once: streamed.peak_bytes counts both, and the estimate holds that peak."""
    out = next(s.out for s in steps if s.op == "output")
    last_use = {name: i for i, s in enumerate(steps) for name in s.inputs}
    covered = {j for idx in streamed.find_chains(steps, last_use, out).values() for j in idx[1:-1]}
    rows = {s.out: s.rows for s in steps}
    best, why = 0, ""
    for i, s in enumerate(steps):
        if s.op not in ("poly", "square") or i in covered:
            continue
        d = step_cost(s)
        held = chunks * (rows[s.inputs[0]] * streamed.ct_bytes(N, d) + s.rows * streamed.ct_bytes(N, 0))
        if held > best:
            best, why = held, (f"activation {s.out!r} holds {rows[s.inputs[0]] * chunks} input ciphertexts at >= {d} "
                               f"levels and its output at once")
    return best, why


def choose_bootstrapped(steps, calib, opts: dict, batch_size: int, max_key_bytes: float | None = None,
                        max_memory: int | None = None, peaks: dict | None = None) -> tuple[Layout, dict, str]:
    """(the chosen layout, the estimates by layout name, why) for layout="auto", bootstrap=True and a batch size:
    layouts (A) and (P) planned with their bootstraps; the one with the lower estimate among those whose keys fit
    max_key_bytes (none fits: the one with the fewer key bytes). A layout that cannot run the model is listed
    with the reason; when neither can, layout (A)'s error is raised (as layout='batch' would raise it). peaks: the
    values' per-row peaks on calib from a pass already made (compile's), which the planners then do not repeat."""
    max_key_bytes = MAX_BOOT_EVAL_KEY_BYTES if max_key_bytes is None else float(max_key_bytes)
    est: dict = {}
    built: dict = {}
    keys: dict = {}
    errors: dict = {}
    plans = ((Batch, lambda: batch_bootstrap.plan_bootstrapped(steps, calib, opts, batch_size, peaks)),
             (Packed, lambda: plan_packed_bootstrapped(steps, calib, opts, batch_size, peaks)))
    for cls, plan in plans:
        if cls is Batch and max_memory is not None:          # hopeless for the budget: skip planning its bootstraps
            N = Params.preset(batch_bootstrap.boot_preset(opts.get("preset"), bool(opts["allow_insecure"]))["name"]).N
            floor, why = batch_memory_floor(steps, N, -(-int(batch_size) // (N // 2)))
            if floor > max_memory:
                errors[cls.name] = ResourceError(f"at least ~{floor / GIB:.3g} GiB of server memory with layout "
                                                 f"{cls.name} ({why}), above {max_memory / GIB:.3g} GiB")
                est[cls.name] = f"not possible: {errors[cls.name]}"
                continue
        try:
            if cls is Packed and (opts.get("mambo") is True or opts.get("batch_bootstrap") not in ("auto", False)):
                raise UnsupportedError("layout (P) runs single CtS-first bootstraps: mambo=True / batch_bootstrap "
                                       "are layout (A) options")
            lay = cls.plan(plan())
        except (UnsupportedError, ShapeError, LevelError, EncodingError) as exc:
            errors[cls.name] = exc
            est[cls.name] = f"not possible: {exc}"
            continue
        need, key_bytes = memory_bytes(lay)
        if max_memory is not None and need > max_memory:
            errors[cls.name] = ResourceError(f"~{need / GIB:.3g} GiB of server memory with layout {cls.name}, above "
                                             f"{max_memory / GIB:.3g} GiB")
            est[cls.name] = f"not possible: {errors[cls.name]}"
            continue
        built[cls.name], est[cls.name], keys[cls.name] = lay, float(lay.estimate()), key_bytes
    est["mlwe"] = ("not compared: layout (A′) refreshes its activation segments only when asked (layout='mlwe'); "
                   "its keys grow with N/batch ModPack keys")
    if not built:
        over = [e for e in errors.values() if isinstance(e, ResourceError)]
        if over:
            raise ResourceError("no layout's bootstrapped plan fits the server memory budget (estimated before any key "
                                "or ciphertext exists): " + "; ".join(f"{k}: {v}" for k, v in est.items()
                                                                       if k != "mlwe")
                                + ". Compile with a smaller batch_size, or server_memory=<bytes> when the server has "
                                "more memory than this machine (server_memory=None: no limit)")
        raise errors["batch"]
    fits = [k for k in built if keys[k] <= max_key_bytes]
    best = min(fits, key=est.get) if fits else min(built, key=keys.get)

    def line(k):
        b = batch_bootstrap.summary(built[k].steps, built[k].params, built[k].batch_size) or {}
        n = sum(r["bootstraps"] for r in b.get("placements", []))
        return (f"{built[k].label} {est[k]:.3g} s incl. {n} bootstrap call(s) ~{b.get('boot_seconds', 0.0):.3g} s, "
                f"keys ~{keys[k] / GIB:.2f} GiB")

    parts = [line(k) for k in built]
    limit = f"{max_key_bytes / GIB:.0f} GiB"
    if not fits:
        why = f"bootstraps included: {'; '.join(parts)}; no layout's keys fit {limit}: the smaller keys"
    elif len(built) == 1:
        why = f"bootstraps included: {parts[0]}; the only layout that bootstraps this model"
    else:
        over = [k for k in built if k not in fits]
        why = (f"bootstraps included: {'; '.join(parts)}; "
               + (f"{over[0]}'s keys exceed {limit}" if over else f"the cheaper, keys within {limit}"))
    lay = built[best]
    lay.commit()
    return lay, est, why


def _refuse(message: str, mambo_too: bool = True):
    """A layout's check of the bootstrap-pipeline options (mambo / batch_bootstrap are layout (A)'s)."""
    def check(opts):
        if (opts["mambo"] is True) or (mambo_too and opts["batch_bootstrap"] not in ("auto", False)):
            raise UnsupportedError(message)
    return check


#: per layout: its bootstrapped planner and its check of the pipeline options (one entry per layout: compile has no
#: per-layout branch)
BOOTSTRAPPED = {
    "batch": (batch_bootstrap.plan_bootstrapped, lambda opts: None),
    "packed": (plan_packed_bootstrapped, _refuse(
        "layout (P) refreshes one packed ciphertext per value with single CtS-first bootstraps: mambo=True / "
        "batch_bootstrap are layout (A) options")),
    "mlwe": (plan_mlwe_bootstrapped, _refuse(
        "layout (A') runs the linear layer before a refresh at level 1 already (MaMBo's arrangement, on "
        "coefficient-encoded values): mambo=True is a layout (A) option", mambo_too=False)),
    "blocked": (plan_blocked_bootstrapped, _refuse(
        "layout (C) refreshes its blocks with single CtS-first bootstraps: mambo=True / batch_bootstrap are layout "
        "(A) options")),
}


def plan_with_bootstraps(steps, calib, opts: dict, batch_size, budget,
                         peaks: dict | None = None) -> tuple[Layout, dict, str]:
    """The bootstrapped plan compile(..., bootstrap=True) asks for: layout (C) with encrypted weights, the layout
    named by the layout option, or with layout="auto" and a batch size the cheaper of (A) and (P)
    (choose_bootstrapped); then one memory check with the bootstrapping keys. peaks: as in choose_bootstrapped."""
    name = "blocked" if opts["encrypted_weights"] else opts["layout"]
    if name == "auto" and batch_size is not None:
        lay, estimates, why = choose_bootstrapped(steps, calib, opts, int(batch_size), max_memory=budget,
                                                  peaks=peaks)
    else:
        name = "batch" if name == "auto" else name
        if name not in BOOTSTRAPPED:        # a layout without a bootstrap placement (docs/extending.md)
            raise UnsupportedError(f"layout {get(name).label} plans no bootstraps: compile it with bootstrap=False, "
                                   "or use layout='batch'")
        plan, check = BOOTSTRAPPED[name]
        check(opts)
        lay, estimates, why = choose([get(name)], plan(steps, calib, opts, batch_size, peaks))
    check_memory(lay.name, server_bytes(lay), budget)
    return lay, estimates, why
