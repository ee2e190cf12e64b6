"""The CUDA backend on one GPU, side by side with DESILO's GPU library in the same run: key switching ops at
N = 2^16, the exact modular GEMM against the card's own fp64 GEMM.

Needs the CUDA library (scripts/build_cuda.sh) and a device; runs without the CPU core (the operands are uniform
residues drawn from a seed: the work is the same as on real ciphertexts, which the bit-exactness tests cover).
Each timing synchronises the device after every call (end-to-end latency of one call, launch gaps included).
DESILO runs in a subprocess (hemlp.apps.bench.gpu_desilo) so that a failure there loses nothing here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

from hemlp.apps.bench import measure, report

HELP = "CUDA backend ops at N16-boot and the exact modular GEMM, with DESILO FHE on the same GPU"


def add_arguments(p):
    p.add_argument("--json", help="write the results here")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--preset", default="N16-boot", help="a preset of tests/gpu/golden_digests.json")
    p.add_argument("--gemm", default="4096,4096,16384", help="d1,d2,ncols of the modular GEMM (0 skips it)")
    p.add_argument("--no-desilo", action="store_true", help="skip the DESILO peer")
    p.add_argument("--desilo-repeats", type=int, default=10)


def timed(fn, sync, repeats: int, warmup: int = 2) -> dict:
    """measure() of fn with the device synchronised after every call (end-to-end latency, launch gaps included)."""
    def call():
        fn()
        sync()

    rec = measure(call, repeats, warmup)
    rec.update(max_s=max(rec["samples"]), measured=True)
    return rec


def hemlp_ops(preset: str, repeats: int) -> dict:
    from hemlp.gpu import golden
    from hemlp.gpu.device import CudaEvaluator, DeviceCiphertext, DeviceSpec

    spec = DeviceSpec.from_dict(golden.load_table()["specs"][preset])
    dev = CudaEvaluator(spec)
    L = spec.max_level
    ct = lambda seed, lv: DeviceCiphertext([dev.upload_poly(golden.poly(spec, seed + j, lv)) for j in range(2)],  # noqa: E731
                                           lv, golden.SCALE, spec.n // 2, 0, False, golden.KEY_ID, spec.param_hash)
    a, b = ct(1, L), ct(3, L)
    rlk = dev.upload_key_arrays(*golden.key_digits(spec, 5, L), L, 0, golden.KEY_ID)
    g1 = golden.galois_element(spec, 1)
    rot = {g1: dev.upload_key_arrays(*golden.key_digits(spec, 6, L), L, g1, golden.KEY_ID)}
    hoist_steps = list(range(1, 9))
    hkeys = {golden.galois_element(spec, s): dev.upload_key_arrays(*golden.key_digits(spec, 100 + s, L), L,
                                                                   golden.galois_element(spec, s), golden.KEY_ID)
             for s in hoist_steps}
    poly_ext = dev.upload_poly(golden.poly(spec, 9, L, ext=True))
    sync = dev.synchronize
    ops = {
        "ntt_top_ext": timed(lambda: dev.ntt(poly_ext, L, ext=True), sync, repeats),
        "add_top": timed(lambda: dev.add(a, b), sync, repeats),
        "rescale_top": timed(lambda: dev.rescale(a), sync, repeats),
        "mul_relin_rescale_top": timed(lambda: dev.mul(a, b, rlk, rescale=True), sync, repeats),
        "rotate_top": timed(lambda: dev.rotate(a, 1, rot), sync, repeats),
        "rotate_hoisted8_top": timed(lambda: dev.rotate_hoisted(a, hoist_steps, hkeys), sync, repeats),
    }
    # a PCMM layer (BCHPS, RLWE format): a 256 x 256 integer matrix times 256 ciphertexts at level 1 (MaMBo's
    # arrangement), rescaled: 2 limbs x 2 parts of exact GEMMs, each ciphertext holding N/2 inputs
    from hemlp.gpu.device import GemmPlan

    rng = np.random.default_rng(1)
    U = rng.integers(-128, 129, size=(256, 256), dtype=np.int64)
    plan = GemmPlan(dev, U, 7)
    rows = [ct(1000 + 2 * i, 1) for i in range(256)]
    ops["pcmm_rlwe_256x256_L1"] = timed(lambda: dev.pcmm_rlwe(plan, rows, 1, 1, 1.0, rescale=True), sync,
                                        max(3, repeats // 4))
    ops["pcmm_rlwe_256x256_L1"]["per_encrypted_vector_s"] = ops["pcmm_rlwe_256x256_L1"]["median_s"] / (spec.n // 2)
    # the same 256 x 256 matrix in the MLWE format (k = 16 rows per coefficient-encoded ciphertext, 4096 columns):
    # 16 ciphertexts in and out, 16 ModPack key switches per output
    k = 16
    mrows = [DeviceCiphertext([dev.upload_poly(golden.poly(spec, 3000 + 2 * i + j, 1)) for j in range(2)], 1,
                              golden.SCALE, spec.n, 1, False, golden.KEY_ID, spec.param_hash) for i in range(256 // k)]
    mkeys = [dev.upload_key_arrays(*golden.key_digits(spec, 400 + v, 1), 1, 0, golden.KEY_ID) for v in range(k)]
    ops["pcmm_mlwe_256x256_k16_L1"] = timed(lambda: dev.pcmm_mlwe(plan, mrows, k, 1, 1.0, mkeys, rescale=True), sync,
                                            max(3, repeats // 4))
    ops["pcmm_mlwe_256x256_k16_L1"]["per_encrypted_vector_s"] = \
        ops["pcmm_mlwe_256x256_k16_L1"]["median_s"] / (spec.n // k)
    # and in the MSRLWE format: 256 rows of k = 8 chunks sharing each row's a-part, one GEMM over the a-parts and one
    # per chunk over the b-parts
    from hemlp.gpu.msrlwe import DeviceMsCiphertext, pcmm_msrlwe

    kc = 8
    msrows = [DeviceMsCiphertext(dev.upload_poly(golden.poly(spec, 6000 + 16 * i, 1)),
                                 [dev.upload_poly(golden.poly(spec, 6001 + 16 * i + j, 1)) for j in range(kc)], 1,
                                 golden.SCALE, spec.n // 2, 0, golden.KEY_ID, spec.param_hash) for i in range(256)]
    ops["pcmm_msrlwe_256x256_k8_L1"] = timed(lambda: pcmm_msrlwe(dev, plan, msrows, 1, 1.0), sync,
                                             max(3, repeats // 4))
    ops["pcmm_msrlwe_256x256_k8_L1"]["per_encrypted_vector_s"] = \
        ops["pcmm_msrlwe_256x256_k8_L1"]["median_s"] / (kc * spec.n // 2)
    # a CoeffToSlot-sized BSGS level at the top: 32 diagonals (baby steps 0..7, giant steps 0, 8, 16, 24), double
    # hoisting, rescaled
    from hemlp.gpu.lintrans import DeviceLinearTransform

    giant, baby = [0, 8, 16, 24], [list(range(8))] * 4
    lt = DeviceLinearTransform(dev, L, 2.0 ** 30, spec.n // 2, giant, baby,
                               [golden.poly(spec, 5000 + t, L, ext=True) for t in range(32)])
    lkeys = {golden.galois_element(spec, st): dev.upload_key_arrays(*golden.key_digits(spec, 300 + st, L), L,
                                                                    golden.galois_element(spec, st), golden.KEY_ID)
             for st in lt.steps}
    ops["lintrans_bsgs32_top"] = timed(lambda: lt.apply(a, lkeys, rescale=True), sync, max(5, repeats // 2))
    ops["lintrans_bsgs32_top"]["shape"] = "32 diagonals: baby 0..7 x giant 0, 8, 16, 24; double hoisting"
    # EvalMod-sized polynomial (Chebyshev, degree 31: 5 levels) from the top, and ModRaise of a level-0 ciphertext
    from hemlp.gpu.boot_steps import DeviceEncapsulationKeys, mod_raise
    from hemlp.gpu.polyeval import evaluate_polynomial

    coeffs = list(np.random.default_rng(2).uniform(-1, 1, 32))
    ops["polyeval_cheb31_top"] = timed(lambda: evaluate_polynomial(dev, a, coeffs, "chebyshev", rlk, golden.SCALE),
                                       sync, max(5, repeats // 3))
    ekeys = DeviceEncapsulationKeys(dev, L, *golden.encapsulation_inputs(spec, 77), golden.KEY_ID, golden.KEY_ID + 1)
    low = DeviceCiphertext([dev.upload_poly(golden.poly(spec, 80 + j, 0)) for j in range(2)], 0, golden.SCALE,
                           spec.n // 2, 0, False, golden.KEY_ID + 1, spec.param_hash)
    ops["mod_raise_to_top"] = timed(lambda: mod_raise(dev, low, ekeys, L), sync, repeats)
    ops["ntt_top_ext"]["limbs"] = L + 1 + len(spec.p)
    ops["rotate_hoisted8_top"]["per_rotation_s"] = ops["rotate_hoisted8_top"]["median_s"] / len(hoist_steps)
    return {"preset": preset, "log_n": spec.log_n, "levels": L, "top_level": L, "p_primes": len(spec.p),
            "digits": spec.num_digits(L), "ops": ops}


def gemm_row(name: str, engine: str) -> str:
    """The payload key of one modulus's row on one engine: q60 (fp64, the first engine), q60_int8."""
    from hemlp.gpu.device import GEMM_ENGINES

    return name if engine == GEMM_ENGINES[0] else f"{name}_{engine}"


def gemm_rows() -> list[str]:
    from hemlp.gpu.device import GEMM_ENGINES

    return [gemm_row(name, e) for e in GEMM_ENGINES for name in ("q40", "q60")]


def gemm(shape: str, repeats: int) -> dict:
    d1, d2, ncols = (int(v) for v in shape.split(","))
    if d1 == 0:
        return {}
    from hemlp.gpu import golden
    from hemlp.gpu.device import GEMM_ENGINES, CudaEvaluator, DeviceBuffer, DeviceSpec, GemmPlan

    spec = DeviceSpec.from_dict(golden.load_table()["specs"]["N16-boot"])
    dev = CudaEvaluator(spec)
    rng = np.random.default_rng(0)
    out = {"shape": [d1, d2, ncols], "bU": 8, "engines": list(GEMM_ENGINES)}
    U = rng.integers(-256, 257, size=(d1, d2), dtype=np.int64)
    plans = {engine: GemmPlan(dev, U, 8, engine) for engine in GEMM_ENGINES}
    for name, q in (("q40", spec.q[1]), ("q60", spec.q[0])):
        X = rng.integers(0, q, size=(d2, ncols), dtype=np.uint64)
        xb = dev.upload(X)                 # one operand for both engines: rows q40, q40_int8, ...
        cb = DeviceBuffer(dev, d1 * ncols)
        for engine, plan in plans.items():
            rec = timed(lambda: plan.apply(xb, ncols, q, cb), dev.synchronize, repeats)
            rec.update(q_bits=int(q).bit_length(), engine=engine)
            # exactness spot check: 64 output entries against Python integers
            C = dev.download(cb, (d1, ncols))
            ri, ci = rng.integers(0, d1, 64), rng.integers(0, ncols, 64)
            exact = all(int(C[r, c]) == sum(int(U[r, k]) * int(X[k, c]) for k in range(d2)) % q
                        for r, c in zip(ri, ci))
            rec["spot_check_exact"] = bool(exact)
            out[gemm_row(name, engine)] = rec
        del xb, cb
    try:
        import torch

        A = torch.randn(d1, d2, dtype=torch.float64, device="cuda")
        B = torch.randn(d2, ncols, dtype=torch.float64, device="cuda")
        out["torch_fp64_gemm"] = timed(lambda: A @ B, torch.cuda.synchronize, repeats)
        out["torch_fp64_gemm"]["tflops"] = 2 * d1 * d2 * ncols / out["torch_fp64_gemm"]["median_s"] / 1e12
        for name in gemm_rows():
            out[name]["ratio_to_fp64_gemm"] = out[name]["median_s"] / out["torch_fp64_gemm"]["median_s"]
    except Exception as e:  # noqa: BLE001 - the baseline is optional; say why it is missing
        out["torch_fp64_gemm"] = {"error": f"{type(e).__name__}: {e}"}
    return out


def bootstrap(repeats: int, out_dir: str, cmd: list | None = None) -> dict:
    """hemlp's bootstrapping on the device (hemlp.apps.bench.gpu_boot) in a subprocess: it needs the CPU core, and a
    core that crashes there (a segfault) then costs this row, not the run. ``cmd``: the child's command line."""
    import importlib.util

    if cmd is None and importlib.util.find_spec("hemlp._core") is None:
        return {"skipped": "the CPU core is not built on this machine (the plans and keys come from it)"}
    path = os.path.join(out_dir, "gpu_bootstrap.json")
    cmd = cmd or [sys.executable, "-m", "hemlp.apps.bench.gpu_boot", "--repeats", str(repeats), "--out", path]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 600 s"}
    if r.returncode != 0:
        how = (f"killed by signal {-r.returncode}" if r.returncode < 0 else f"exit status {r.returncode}")
        return {"error": f"{how}: {(r.stderr or r.stdout)[-1200:]}"}
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"error": f"no result from the child: {e}"}


def desilo(repeats: int, out_dir: str) -> dict:
    """DESILO's GPU library through hemlp.apps.bench.gpu_desilo in a subprocess (it writes its JSON after every op,
    so a timeout still leaves what was measured)."""
    path = os.path.join(out_dir, "desilo.json")
    cmd = [sys.executable, "-m", "hemlp.apps.bench.gpu_desilo", "--device", "gpu", "--repeats", str(repeats),
           "--bootstrap-repeats", str(max(3, repeats // 2)), "--out", path]
    note = None
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=360)
        if r.returncode != 0:
            note = f"exit {r.returncode}: {(r.stderr or r.stdout)[-1500:]}"
    except subprocess.TimeoutExpired:
        note = "timed out after 360 s"
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {"error": note or "no output"}
    if note:
        doc["error"] = note
    return doc


def print_table(payload: dict) -> None:
    ops = payload["hemlp"]["ops"]
    peer = payload.get("desilo", {}).get("ops", {}) if isinstance(payload.get("desilo"), dict) else {}
    rows = []
    for name, rec in ops.items():
        if "median_s" not in rec:
            rows.append([name, str(rec.get("skipped") or rec.get("error"))[:60], "", ""])
            continue
        p = peer.get(name, {}) if isinstance(peer, dict) else {}
        pm = p.get("median_s") if isinstance(p, dict) else None
        rows.append([name, report.fmt_ms(rec["median_s"]), report.fmt_ms(pm) if pm else "n/a",
                     report.fmt_ratio(rec["median_s"] / pm) if pm else "n/a"])
    for name, p in (peer.items() if isinstance(peer, dict) else []):
        if name not in ops and isinstance(p, dict):
            rows.append([name, "n/a", report.fmt_ms(p["median_s"]) if p.get("median_s") else p.get("error", "n/a")[:40],
                         "n/a"])
    report.table(["op (N16-boot, top level)", "hemlp ms", "DESILO ms", "hemlp/DESILO"], rows,
                 title=f"GPU: {payload['device'].get('name')} (measured, median of {payload['repeats']})")
    g = payload.get("gemm") or {}
    if g:
        rows = [[k, report.fmt_ms(g[k]["median_s"]), report.fmt_ratio(g[k].get("ratio_to_fp64_gemm")),
                 str(g[k].get("spot_check_exact"))] for k in gemm_rows() if k in g]
        report.table(["modgemm " + "x".join(map(str, g["shape"])), "ms", "vs fp64 GEMM", "exact"], rows)
    for n in payload["notes"]:
        print("note:", n)


def main(args) -> int:
    from hemlp.gpu.library import device_info

    info = device_info()
    if not info["available"]:
        print(f"hemlp bench gpu: {info['reason']}", file=sys.stderr)
        return 2
    payload = {"device": info, "repeats": args.repeats, "notes": [
        "hemlp ops on uniform operands of the preset (same work as real ciphertexts; bit-exactness: tests/gpu)",
        "N16-boot is the 128-bit bootstrapping preset; every op at the top level",
        "bootstrap: hemlp.gpu.bootstrap.DeviceBootstrapper, full slots, from level 0 (needs the CPU core for setup)"]}
    try:
        import torch

        payload["device"]["torch_cuda"] = torch.version.cuda
    except Exception:  # noqa: BLE001
        pass
    out_dir = os.path.dirname(os.path.abspath(args.json)) if args.json else "."
    payload["hemlp"] = hemlp_ops(args.preset, args.repeats)
    payload["gemm"] = gemm(args.gemm, max(5, args.repeats // 3))
    try:
        payload["hemlp"]["ops"]["bootstrap"] = bootstrap(max(3, args.repeats // 6), out_dir)
    except Exception as e:  # noqa: BLE001 - recorded, so the rest of the run is kept
        payload["hemlp"]["ops"]["bootstrap"] = {"error": f"{type(e).__name__}: {e}"}
    payload["desilo"] = {"skipped": True} if args.no_desilo else desilo(args.desilo_repeats, out_dir)
    machine = report.machine_info()
    machine["gpu"] = info
    machine["nvcc"] = os.environ.get("HEMLP_NVCC_VERSION")
    try:
        machine["gpu_driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                               capture_output=True, text=True, timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        machine["gpu_driver"] = None
    return report.publish(payload, "gpu", args.json, machine, None, print_table)
