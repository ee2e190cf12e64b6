#!/usr/bin/env python3
"""Render docs/benchmarks.md from the benchmark JSON files in bench/: one current table per benchmark, every
figure read from the JSON file named above its table; and the README's bootstrapping figures (the line after
README_BOOT). tests/apps/test_docs.py checks both are up to date.

    python scripts/bench_tables.py            # rewrite docs/benchmarks.md
    python scripts/bench_tables.py --check    # exit 1 when docs/benchmarks.md differs from the JSON files
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
OUT = ROOT / "docs" / "benchmarks.md"


def load(name: str) -> dict:
    return json.loads((BENCH / name).read_text())


def table(head: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def machine(d: dict) -> str:
    m = d.get("machine", {})
    cpu = m.get("cpu", {})
    la = m.get("load_average")
    simd = "AVX-512" if "avx512f" in cpu.get("simd_flags", []) else "AVX2" if "avx2" in cpu.get("simd_flags", []) \
        else "scalar"
    env = m.get("env", {})
    scalar = " (HEMLP_DISABLE_AVX512=1)" if env.get("HEMLP_DISABLE_AVX512") == "1" else ""
    path = (m.get("simd") or {}).get("path")
    if path:   # the kernels hemlp ran (HEMLP_SIMD may force a narrower path than the CPU has)
        scalar += f", hemlp SIMD path {path}" + (f" (HEMLP_SIMD={env['HEMLP_SIMD']})" if env.get("HEMLP_SIMD") else "")
    if env.get("OPENBLAS_CORETYPE"):
        scalar += f", OPENBLAS_CORETYPE={env['OPENBLAS_CORETYPE']}"
    return (f"{cpu.get('model', '?')}, {cpu.get('logical_cores', '?')} cores, {simd} CPU{scalar}; "
            f"{m.get('date', '?')[:10]}; load average {', '.join(f'{x:.1f}' for x in la) if la else '?'}")


def ms(s) -> str:
    return f"{s * 1e3:.3g}"


def sec(s) -> str:
    return f"{s:.3g} s"


def section(title: str, source: str, command: str, body: str, d: dict | None = None) -> str:
    where = f"`bench/{source}`" + (f" — {machine(d)}" if d is not None and "machine" in d else "")
    return f"## {title}\n\nSource: {where}.  \nCommand: `{command}`\n\n{body}\n"


def peers_core(name: str, title: str, command: str) -> str:
    d = load(name)
    ops = [("mul", "ct×ct + relin + rescale"), ("rotate", "rotate"), ("rotate_hoisted8", "8 hoisted rotations")]
    rows = []
    for r in d["runs"]:
        p = r["peers"]
        for op, label in ops:
            t = {k: p[k]["ops"][op]["median_s"] for k in ("hemlp", "openfhe", "tenseal") if op in p[k]["ops"]}
            rat = r["ratios_hemlp_over_peer"]
            rows.append([f"2^{r['logn']}, {r['threads']}", label] + [ms(t[k]) if k in t else "–"
                                                                     for k in ("hemlp", "openfhe", "tenseal")]
                        + [f"{rat[k][op]:.2f}×" if op in rat.get(k, {}) else "–" for k in ("openfhe", "tenseal")])
    passed = sum(t["status"] == "PASS" for t in d["targets"])
    body = (table(["N, threads", "op", "hemlp ms", "OpenFHE ms", "TenSEAL ms", "hemlp/OpenFHE", "hemlp/TenSEAL"], rows)
            + f"\n\nMedian milliseconds. Target checks passed: {passed} of {len(d['targets'])}.")
    return section(title, name, command, body, d)


def core(name: str, command: str) -> str:
    d = load(name)
    ops = list(d["results"][0]["ops"])
    rows = [[r["threads"]] + [ms(r["ops"][o]["median_s"]) for o in ops] for r in d["results"]]
    rows += [[f"{r['threads']}, CPU"] + [ms(r["ops"][o]["cpu_median_s"]) for o in ops] for r in d["results"]
             if all("cpu_median_s" in r["ops"][o] for o in ops)]
    body = table(["threads"] + [f"{o} ms" for o in ops], rows) + \
        f"\n\nPreset {d['preset']['name']}; precision (bits): " + ", ".join(
            f"{k} {v:.1f}" for k, v in d["results"][0]["precision"].items()) + \
        ". Medians of wall-clock time; the rows marked CPU: of the process's CPU time (less changed by other " \
        "processes on a shared machine; the planner's unit costs are the one-thread CPU medians)."
    return section("CKKS core (hemlp alone)", name, command, body, d)


def peers_pcmm(name: str, command: str) -> str:
    d = load(name)
    rows = [[f"{r['d']}×{r['d']} @ Enc({r['d']}×8192)", r["threads"], sec(r["hemlp_s"]), sec(r["openfhe_s"]),
             f"{r['speedup_vs_openfhe']:.1f}×", f"{r['hemlp_bits']:.1f} / {r['openfhe_bits']:.1f}"]
            for r in d["results"]]
    body = table(["product", "threads", "hemlp PCMM", "OpenFHE", "hemlp speed-up", "bits hemlp / OpenFHE"], rows)
    return section("PCMM vs OpenFHE", name, command, body, d)


def pcmm(name: str, title: str, command: str) -> str:
    d = load(name)
    cpu = any("cpu_ratio" in r for r in d["results"])
    rows = []
    for r in d["results"]:
        # fresh-ciphertext rows name their path (fresh-top, compiled, compiled-L0) and level
        fmt = f"{r['format']}, {r['path']}" if r.get("path") else r["format"]
        if r.get("preset"):  # a run of several presets side by side
            fmt = f"{r['preset']}: {fmt}"
        if r.get("level") is not None:
            fmt += f" (L{r['level']}{', not rescaled' if r.get('rescale') is False or r.get('path') == 'compiled-L0' else ''}" \
                   f"{', ' + str(r['weight_bits']) + '-bit weights' if r.get('weight_bits') else ''})"
        if r.get("skipped"):
            rows.append([r["d"], r["d3_label"], fmt, "–", "skipped", "–", "–"] + (["–"] if cpu else []) + ["–"])
            continue
        rows.append([r["d"], r["d3_label"], fmt, r["threads"], sec(r["pcmm_s"]),
                     sec(r["gemm_s"]) if r.get("gemm_s") else "–", f"{r['ratio']:.1f}×" if r.get("ratio") else "–"]
                    + ([f"{r['cpu_ratio']:.1f}×" if r.get("cpu_ratio") else "–"] if cpu else [])
                    + [f"{r['bits']:.1f}" if r.get("bits") is not None else "–"])
    body = table(["d1 = d2", "d3", "format", "threads", "PCMM", "fp64 GEMM", "PCMM / GEMM"]
                 + (["CPU ratio"] if cpu else []) + ["bits"], rows)
    return section(title, name, command, body, d)


def modgemm(name: str, command: str) -> str:
    d = load(name)
    rows = [[r["threads"], r["d"], r["n"], r["q_bits"], r["T"], f"{r['ratio']:.2f}×", f"{r['cpu_ratio']:.2f}×"]
            for r in d["results"]]
    body = table(["threads", "d", "n", "q bits", "DGEMMs (T)", "wall ratio", "CPU ratio"], rows) + \
        "\n\nRatio = exact modular GEMM (ModGemmPlan) / numpy fp64 GEMM of the same shape."
    return section("Exact modular GEMM vs fp64 GEMM", name, command, body)


def infer(name: str, command: str, title: str = "Encrypted inference (MNIST MLP 784-128-64-10, x²)") -> str:
    d = load(name)
    s = d["single_image"]
    rows = [["encrypted vs plaintext top-1 agreement", f"{d['agreement']:.1%} of {d['n_agreement']} (layout {'A'})"],
            [f"server run, batch {d['batch']} (layout A)", f"{sec(d['run_s'])} ({d['run_ms_per_image']:.2f} ms per image)"],
            [f"client encrypt / decrypt, batch {d['batch']}", f"{sec(d['encrypt_s'])} / {sec(d['decrypt_s'])}"],
            ["evaluation keys, layout A", f"{d['eval_key_bytes'] / 1e6:.1f} MB"],
            [f"single image, layout ({s['layout'][0].upper()}) server run (median of {s['n']})",
             f"{s['run_s_median'] * 1e3:.0f} ms, agreement {s['agreement']:.0%}"],
            ["single image in layout A", sec(s["run_s_layout_a"])],
            ["layout P keys / upload per request",
             f"{s['eval_key_bytes'] / 1e6:.1f} MB / {s['input_bytes'] / 1e6:.1f} MB ({s['input_ciphertexts']} ciphertexts)"],
            ["accuracy plain / simulated / encrypted (held-out digits)",
             f"{d['accuracy_plain']:.1%} / {d['accuracy_simulated']:.1%} / {d['accuracy_encrypted']:.1%}"],
            ["max abs(encrypted − simulated) logit", f"{d['max_abs_err_vs_simulate']:.2g}"]]
    u = d.get("final_rescale_false")
    if u:
        rows.append(["final_rescale=False (last layer unrescaled at L0)", f"skipped: {u['skipped']}" if "skipped" in u
                     else f"input L{u['top_level']}, {sec(u['run_s'])} ({u['run_ms_per_image']:.2f} ms per image), "
                          f"agreement {u['agreement']:.1%}"])
    body = table(["metric", "value"], rows) + f"\n\nPreset {d['preset']}, {d['threads']} threads."
    return section(title, name, command, body, d)


def layouts(name: str, command: str) -> str:
    d = load(name)
    rows = []
    for r in d["results"]:
        if r.get("skipped"):
            cell = f"skipped: {r['skipped']}; estimate {sec(r['estimate_s'])}"
        else:
            cell = (f"{sec(r['run_s'])} ({r['run_ms_per_image']:.3g} ms/image), keys "
                    f"{r['eval_key_bytes'] / 1e6:.4g} MB, agreement {r['agreement']:.0%}")
        rows.append([r["batch"], r["layout"], r["preset"], cell])
    body = table(["batch", "layout", "preset", "server run, keys, agreement"], rows)
    return section("Layouts per batch size", name, command, body, d)


def weights(name: str, command: str) -> str:
    d = load(name)
    rows = [["model", f"{d['inputs']}-{d['hidden']}-10 (x²), batch {d['batch']}, preset {d['preset']}"],
            ["server run per batch / per image", f"{sec(d['run_s'])} / {sec(d['run_s_per_image'])}"],
            ["agreement with plaintext; max logit error", f"{d['agreement']:.0%}; {d['max_abs_err_vs_plaintext']:.2g}"],
            ["encrypted weights", f"{d['encrypted_weight_bytes'] / 1e6:.1f} MB"],
            ["evaluation keys", f"{d['rotation_keys']} rotation keys + relinearisation, "
                                f"{d['eval_key_bytes'] / 1e6:.0f} MB (keygen {sec(d['keygen_s'])})"]]
    body = table(["metric", "value"], rows)
    return section("Encrypted weights (layout C)", name, command, body, d)


def ray(command: str) -> str:
    files = [("ray_mlp_N14.json", "MLP, batch 8 192"), ("ray_mlp_N14_b4096.json", "MLP, batch 4 096"),
             ("ray_mlp_N14_b16384.json", "MLP, batch 16 384"), ("ray_mlp512_N14.json", "784-512-128-10, batch 8 192"),
             ("ray_mlp_N14_2nodes.json", "MLP, batch 8 192, two raylets")]
    rows = []
    for f, label in files:
        d = load(f)
        t = {r["label"]: r["seconds"] for r in d["results"]}
        s = d["summary"]
        pc = s.get("pcmm_speedup_1_to_2_workers", {}).get("linear_0")
        rows.append([label, f"`{f}`", sec(t["local, 1 thread(s)"]), sec(t["local, 2 thread(s)"]),
                     sec(t["Ray, 1 worker(s)"]), sec(t["Ray, 2 worker(s)"]),
                     f"{s['overhead_ray1_vs_local1']:+.1%} / {s['overhead_ray2_vs_local2']:+.1%}",
                     f"{pc:.2f}×" if pc else "–"])
    d = load("ray_mlp_N14_back2back.json")
    body = (table(["model", "source", "local 1 thread", "local 2 threads", "Ray 1 worker", "Ray 2 workers",
                   "Ray overhead (1 / 2)", "linear_0 PCMM, 1 → 2 workers"], rows)
            + f"\n\nMedians of the end-to-end runs. Back-to-back 2-worker runs (`bench/ray_mlp_N14_back2back.json`): "
              f"{sec(d['summary']['back_to_back_s'])} per run, input put {sec(d['summary']['back_to_back_input_put_s'])}."
              "\n\nMachines: " + "; ".join(f"`{f}` {machine(load(f))}" for f, _ in files[:1]) + ".")
    return f"## Ray runtime (layout A)\n\nSources: the JSON files named in the table.  \nCommand: `{command}`\n\n{body}\n"


def ray_boot(name: str, command: str) -> str:
    """Layout (A) with bootstraps on Ray: single pair bootstraps, or batched ones (--pipeline batched: k pairs per
    task; rendered when its JSON exists)."""
    if not (BENCH / name).exists():
        return ""
    d = load(name)
    batched = d.get("pipeline") == "batched"
    unit = f"batched call (k = {d['k']} pairs)" if batched else "pair bootstrap"
    rows = []
    for m in d["modes"]:
        label = "in-process, 1 thread" if m["mode"] == "in-process" else f"Ray, {m['workers']} worker(s)"
        per = sec(m["task_bootstrap_s"] / d["bootstraps"]) if "task_bootstrap_s" in m else "–"
        share = m["task_cpu_s"] / m["task_wall_s"] if "task_wall_s" in m else m["cpu_s"] / m["end_to_end_s"]
        la = [b["load_average_before"][0] for b in m.get("blocks", []) if b.get("load_average_before")]
        rows.append([label, sec(m["bootstrap_steps_s"]), sec(m["other_steps_s"]), sec(m["end_to_end_s"]), per,
                     f"{share:.0%}", "yes" if m["bit_identical"] else "NO", " / ".join(f"{v:.1f}" for v in la) or "–"])
    sp = d.get("speedup") or {}
    body = table(["mode", "bootstrap steps", "other steps", "end to end", f"one {unit} (in its task)",
                  "CPU / wall", "bit-identical", "load average (per block)"], rows)
    body += (f"\n\nMLP 6-{d['width']}-{d['width']}-3 compiled with bootstrap=True ({d['preset']}, batch {d['batch']}): "
             f"{d['bootstrap_steps']} bootstrap steps, {d['bootstraps']} {unit}s in all, one Ray task each; "
             f"medians of {d['repeats']} runs in each of {d['rounds']} alternating blocks per worker count."
             + (f" Bootstrap steps 1 → 2 workers: {sp['bootstrap_steps']:.2f}× wall, end to end {sp['end_to_end']:.2f}×."
                if sp else "")
             + (f" The bootstrap tasks' CPU seconds, 1 worker / 2 workers: {sp['task_cpu_ratio']:.2f}, so two otherwise "
                f"idle cores would give about {sp['derived_idle_2_cores']:.2f}× (derived from CPU time, not a wall-time "
                "measurement)." if sp and "task_cpu_ratio" in sp else "")
             + " Wall-time ratio on a shared 2-core machine: the load average says how many other processes ran, and "
               "CPU / wall the share of a core each task (in process: the run) got.")
    title = "Bootstrapped plan on Ray (layout A, bootstrap=True" + (", S2C-first batched bootstrapping)" if batched
                                                                     else ")")
    return section(title, name, command, body, d)


def ray_boot_packed(name: str, command: str) -> str:
    """Layout (P) with bootstraps on Ray: the request's groups as tasks (rendered when its JSON exists)."""
    if not (BENCH / name).exists():
        return ""
    d = load(name)
    rows = []
    for m in d["modes"]:
        label = "in-process, 1 thread" if m["mode"] == "in-process" else f"Ray, {m['workers']} worker(s)" + \
            (f", {m['threads']} threads per task" if m.get("threads", 1) > 1 else "")
        share = m["task_cpu_s"] / m["task_wall_s"] if "task_wall_s" in m else m["cpu_s"] / m["end_to_end_s"]
        la = [b["load_average_before"][0] for b in m.get("blocks", []) if b.get("load_average_before")]
        rows.append([label, sec(m["end_to_end_s"]), sec(m["bootstrap_steps_s"]), sec(m["other_steps_s"]),
                     f"{share:.0%}", "yes" if m["bit_identical"] else "NO", " / ".join(f"{v:.1f}" for v in la) or "–"])
    sp = d.get("speedup") or {}
    body = table(["mode", "end to end", "bootstraps (summed over groups)", "other steps (summed)", "CPU / wall",
                  "bit-identical", "load average (per block)"], rows)
    body += (f"\n\nMLP {d['features']}-{d['width']}-{d['width']}-3 compiled with layout=\"packed\", bootstrap=True "
             f"({d['preset']}): a request of {d['batch']} samples = {d['groups']} groups of {d['samples_per_group']}, "
             f"each group one Ray task with its {d['bootstrap_steps']} bootstrap points inside ({d['bootstraps']} "
             f"bootstraps of {d['boot_slots']} slots in all); medians of {d['repeats']} runs in each of {d['rounds']} "
             "alternating blocks per worker count."
             + (f" End to end 1 → 2 workers: {sp['end_to_end']:.2f}× wall; the tasks' CPU seconds 1 / 2 workers "
                f"{sp['task_cpu_ratio']:.2f} (two otherwise idle cores: about {sp['derived_idle_2_cores']:.2f}×, derived "
                "from CPU time)." if sp and "end_to_end" in sp else "")
             + (f" One task at a time on 2 threads (threads_per_task=2: a node whose memory holds one task) vs 1 "
                f"worker of 1 thread: {sp['threads_2_vs_1_end_to_end']:.2f}× end to end."
                if "threads_2_vs_1_end_to_end" in sp else ""))
    return section("Bootstrapped layout (P) request on Ray (bootstrap=True, groups as tasks)", name, command, body, d)


def files(name: str, command: str) -> str:
    d = load(name)
    rows = [[op, sec(v["median_s"]), f"{d['bytes'] / v['median_s'] / 1e9:.2f} GB/s"] for op, v in d["ops"].items()]
    body = table(["operation", "median", "throughput"], rows) + \
        f"\n\n{d['ciphertexts']} ciphertexts, {d['bytes'] / 1e6:.0f} MB (batch {d['batch']}, preset {d['preset']}); " \
        f"round trip equal: {d['round_trip_equal']}."
    if "container_version" in d:
        body += (f" Container version {d['container_version']} (docs/formats.md): load maps the file, checks its one "
                 f"SHA-256 on a second thread and imports the ciphertexts on {d['threads']} native threads, each "
                 "copied once (its seeded half expanded) into native memory.")
    return section("Encrypted batch files", name, command, body, d)


def boot(name: str, command: str) -> str:
    d = load(name)
    rows = [[r["threads"], sec(r["bootstrap"]["median_s"]), sec(r["bootstrap"]["cpu_median_s"]),
             sec(r["bootstrap_pair"]["median_s"]), r["level_out"], f"{r['max_bits']:.1f}", f"{r['mean_bits']:.1f}",
             f"{r['pair_max_bits']:.1f}"] for r in d["results"]]
    body = table(["threads", "bootstrap", "bootstrap (CPU time)", "pair (two real ciphertexts)", "levels left",
                  "bits (max err)", "bits (mean)", "pair bits (max)"], rows) + \
        f"\n\n{d['preset']} (N = {d['N']}, {d['slots']} slots, log QP {d['log_qp']:g}, {d['security']}); " \
        f"{d['rotation_keys']} rotation keys: {d['key_bytes_serialised'] / 2 ** 30:.2f} GiB serialised, " \
        f"{d['key_bytes_in_memory'] / 2 ** 30:.2f} GiB in memory (seeded Galois keys: {d['seeded_keys']}); DFT " \
        f"matrices {d['plan_bytes'] / 2 ** 30:.2f} GiB; key generation {sec(d['keygen_s'])}; first bootstrap " \
        f"(encodes the DFT matrices) {sec(d['first_bootstrap_s'])}; peak RSS {d['peak_rss_gib']:.1f} GiB; SIMD path " \
        f"{d['simd_path']}; input encrypted with the {'secret' if d['input_encryption'] == 'sk' else 'public'} key, " \
        "output decrypted without IND-CPA-D noise (the precision bootstrapping leaves)."
    return section("Bootstrapping", name, command, body, d)


def peers_boot(name: str, command: str, title: str = "Bootstrapping vs OpenFHE") -> str:
    d = load(name)
    h, o = d["hemlp"], d["openfhe"]
    rows = []
    for r in d["ratios"]:
        ho = next(x for x in h["results"] if x["threads"] == r["threads"])
        oo = next((x for x in o["results"] if x["threads"] == r["threads"]), None) if o else None
        rows.append([r["threads"], sec(r["hemlp_s"]), sec(r["openfhe_s"]) if r["openfhe_s"] else "n/a",
                     f"{r['ratio']:.2f}×" if r["ratio"] else "n/a",
                     f"{r['cpu_ratio']:.2f}×" if r.get("cpu_ratio") else "n/a",
                     f"{ho['max_bits']:.1f}", f"{oo['max_bits']:.1f}" if oo else "n/a"])
    body = table(["threads", "hemlp bootstrap", "OpenFHE EvalBootstrap", "hemlp / OpenFHE (wall)",
                  "hemlp / OpenFHE (CPU time)", "bits hemlp", "bits OpenFHE"], rows)
    if o:
        p = o["params"]
        body += (f"\n\nhemlp {h['preset']}: {h['levels_left']} levels left at 2^40, complex slots, key generation "
                 f"{sec(h['keygen_s'])}, peak RSS {h['peak_rss_gib']:.1f} GiB. OpenFHE {o['version']}: "
                 f"{o['levels_left']} level{'' if o['levels_left'] == 1 else 's'} left (checked by squarings), real slots, {o['secret']} secret, "
                 f"{o['scaling']}, scaling primes 2^{p['scale_bits']}, first prime 2^{p['first_bits']}, "
                 f"{p['dnum']} digits, level budget {o['level_budget']}, depth {p['depth']} (its best 128-bit "
                 f"parameters at N = {o['N']}: {len(o['refused'])} preferred candidates - more levels left or fewer "
                 "digits - refused by its 128-bit check), key generation "
                 f"{sec(o['keygen_s'])}, peak RSS {o['peak_rss_gib']:.1f} GiB. Both run one after the other in one "
                 f"command, {d['repeats']} timed bootstrap{'s' if d['repeats'] > 1 else ''} per side and thread count "
                 "(medians); target hemlp ≤ 0.7× OpenFHE's time.")
    else:
        body += f"\n\nOpenFHE did not run: {d['openfhe_error']}." + "".join(
            f" Note: {n}" for n in d.get("notes_added_after_run", []))
    return section(title, name, command, body, d)


README_BOOT = ("<!-- boot figures: scripts/bench_tables.py writes this line from bench/boot_N16.json, "
               "bench/peers_boot_N16.json and bench/peers_boot_N16_avx2.json -->")


def measured_ratios(name: str) -> tuple:
    """(the peers_boot JSON, its ratios where OpenFHE ran), or (None, []) when the file or OpenFHE's run is missing."""
    if not (BENCH / name).exists():
        return None, []
    p = load(name)
    return p, [r for r in p["ratios"] if r["ratio"]] if p["openfhe"] else []


def readme_boot() -> str:
    """The README's bootstrapping status line, from the JSON files."""
    d = load("boot_N16.json")
    by = {r["threads"]: r for r in d["results"]}
    r2, r1 = by.get(2, d["results"][-1]), by.get(1, d["results"][0])
    la = d.get("machine", {}).get("load_average") or [0.0]
    loaded = f" (machine loaded, load average {la[0]:.0f})" if la[0] > 2 else ""
    line = (f"Bootstrapping ({d['preset']}, N = 2^16, 128-bit): {r1['bootstrap']['cpu_median_s']:.1f} s of CPU time on "
            f"1 thread; wall {r1['bootstrap']['median_s']:.1f} s on 1 thread, {r2['bootstrap']['median_s']:.1f} s on "
            f"{r2['threads']}{loaded}; {d['levels_left']} levels left at 2^40, {r1['max_bits']:.1f} bits (max error), "
            f"peak RSS {d['peak_rss_gib']:.1f} GiB (`bench/boot_N16.json`)")
    p, rs = measured_ratios("peers_boot_N16.json")
    if rs:
        line += ("; " + ", ".join(f"{r['ratio']:.2f}× OpenFHE's EvalBootstrap time on {r['threads']} thread"
                                  f"{'s' if r['threads'] > 1 else ''}" for r in rs)
                 + f" (it keeps {p['openfhe']['levels_left']} level{'' if p['openfhe']['levels_left'] == 1 else 's'}; "
                   f"AVX-512, {p['repeats']} run per side, `bench/peers_boot_N16.json`)")
    p, rs = measured_ratios("peers_boot_N16_avx2.json")
    if rs:
        line += ("; on AVX2 " + ", ".join(f"{r['ratio']:.2f}× ({sec(r['hemlp_s'])} vs {sec(r['openfhe_s'])}, "
                                           f"{r['threads']} thread{'s' if r['threads'] > 1 else ''})" for r in rs)
                 + f", {p['repeats']} runs per side (`bench/peers_boot_N16_avx2.json`)")
    return line + "."


def render_readme(text: str) -> str:
    """README with the line after the README_BOOT marker replaced by readme_boot()."""
    lines = text.split("\n")
    i = lines.index(README_BOOT)
    lines[i + 1] = readme_boot()
    return "\n".join(lines)


def lintrans(name: str, title: str, command: str) -> str:
    d = load(name)
    rows = [[mode, sec(v["median_s"]), sec(v["cpu_min_s"])] for mode, v in d["totals_s"].items()]
    body = table(["path / threads", "wall (median)", "CPU (min)"], rows) + \
        f"\n\nN = 2^{d['log_n']}, {d['slots']} slots, {d['direction']} depth {d['depth']} (stages {d['stages']}) " \
        f"from level {d['top_level']}; python = one native call per operation, single / double = the native " \
        f"transform with single / double hoisting; peak RSS {d['peak_rss_gib']:.2f} GiB. The machine was loaded: " \
        "the CPU column is the comparable one."
    return section(title, name, command, body, d)


def simd_paths(name: str, command: str) -> str:
    d = load(name)
    ops = [("ntt", "NTT (one limb)"), ("mul", "ct×ct + relin + rescale"), ("rotate", "rotate"),
           ("rotate_hoisted8", "8 hoisted rotations")]
    runs = {p: d["simd_runs"][p]["results"][0]["ops"] for p in d["simd_paths"]}
    rows = [[label] + [ms(runs[p][op]["median_s"]) for p in d["simd_paths"]] +
            [f"{d['speedup_vs_scalar'][p][0]['ops'][op]:.2f}×" for p in d["simd_paths"] if p != "scalar"]
            for op, label in ops]
    head = ["op (ms, 1 thread)"] + list(d["simd_paths"]) + [f"{p} vs scalar" for p in d["simd_paths"] if p != "scalar"]
    body = table(head, rows) + f"\n\n{d['preset']['name']}; every path forced with HEMLP_SIMD on the same CPU."
    return section("CKKS core per SIMD path (scalar / AVX2 / AVX-512)", name, command, body, d)


def estimates(name: str, command: str) -> str:
    d = load(name)
    cols = [("eval_key_bytes", "eval keys"), ("upload_bytes", "upload"), ("server_memory_bytes", "server memory"),
            ("keygen_seconds", "keygen"), ("encrypt_seconds", "encrypt"), ("prepare_seconds", "prepare"),
            ("run_seconds", "run")]

    def cell(r, k):
        e, m, q = r["estimated"].get(k), r["measured"].get(k), r["ratio"].get(k)
        f = sec if k.endswith("seconds") else (lambda v: f"{v / 1e6:.3g} MB")
        return "–" if m is None or e is None else f"{f(e)} / {f(m)}" + (f" ({q:.2f})" if q is not None else "")

    rows = [[r["case"], f"{r['layout']}, {r['preset']}, {r['batch']}"] + [cell(r, k) for k, _ in cols]
            for r in d["results"]]
    off = d.get("off_by_more_than_2x") or []
    body = table(["model", "layout, preset, batch"] + [f"{label} est / meas (ratio)" for _, label in cols], rows) + \
        "\n\nEstimates from the plan before any key exists (`compiled.plan.resources`); times are CPU seconds on one " \
        "thread (the planner's unit costs are the core benchmark's one-thread CPU times), prepare = the server's " \
        "one-time encoding of the weights, run = one batch. Off by more than 2×: " + ("; ".join(off) or "none") + "."
    return section("Plan estimates vs measurements", name, command, body, d)


def decrypt_noise(name: str, command: str) -> str:
    d = load(name)
    rows = [[r["ciphertext"], f"{r['bound_log2']:.1f}", r["mode"],
             "-" if r["log2_sigma"] is None else f"{r['log2_sigma']:.1f}",
             "-" if r["est_bits_per_slot"] is None else f"{r['est_bits_per_slot']:.1f}",
             "exact" if r["measured_bits_max"] in ("inf", float("inf")) else f"{float(r['measured_bits_max']):.1f}",
             ms(r["decrypt"]["median_s"])] for r in d["results"]]
    sources = "; ".join(sorted({f"{r['ciphertext']}: {r['bound_source']}" for r in d["results"]}))
    body = table(["ciphertext", "log2 t", "noise", "log2 σ", "bits per slot (std)", "bits (max error)",
                  "decrypt (ms)"], rows) + \
        f"\n\n{d['preset']}; flood: s = {d['flood']['stat_security']}, τ = {d['flood']['queries']}, bound t. " \
        f"t per ciphertext: {sources}. Bits measure the decryption noise alone (against the exact decryption)."
    return section("Decryption noise (IND-CPA-D)", name, command, body, d)


def mambo_end_to_end(name: str, command: str) -> str:
    d = load(name)
    st = d["stages"]
    rows = []
    for b in st["batches"]:
        e = b.get("end_to_end")
        if not e:
            continue
        rows.append([e["k"], e["rows"], sec(e["single_cpu_s"]), sec(e["batched_cpu_s"]), sec(e["mambo_cpu_s"]),
                     f"{e['mambo_vs_single_cpu']:.2f}×", f"{e['single_cpu_s'] / e['batched_cpu_s']:.2f}×",
                     f"{e['mambo_vs_batched_cpu']:.2f}×",
                     f"{e['single_min_bits']:.1f} / {e['batched_min_bits']:.1f} / {e['mambo_min_bits']:.1f}"])
    n = next(b["end_to_end"] for b in st["batches"] if b.get("end_to_end"))
    body = table(["k", "rows", "PCMM + single (CPU)", "PCMM + batch (CPU)", "MaMBo (CPU)", "MaMBo vs single",
                  "batch vs single", "MaMBo vs batch", "bits single / batch / MaMBo"], rows) + \
        (f"\n\nMeasured, not derived: {n['rows']} real rows and one U through each path (the single path and MaMBo "
         f"on the same ciphertexts at level {n['input_level']}, the batch path on the same values encrypted one level "
         f"above SlotToCoeff), median CPU seconds of {len(n['mambo_samples_s'])} interleaved runs per path, "
         f"{d['threads']} thread, {d['preset']} ({d['security']}). PCMM + single: the PCMM at that level, then "
         "CtS-first single bootstraps, two real rows per bootstrap; PCMM + batch: the PCMM, then one S2C-first "
         "bootstrap_batch of the joined pairs; MaMBo: pcmm_bootstrap (SlotToCoeff on the input rows, the PCMM at "
         "level 1, the batched refresh). Bits: the worst output against U·X with the decryption noise.")
    return section("MaMBo end to end (measured)", name, command, body, d)


def cifar_resnet(enc_name: str, poly_name: str, enc_command: str, poly_command: str) -> str:
    e, p = load(enc_name), load(poly_name)
    rs, n = e["rows"], len(e["rows"])
    cpu = sorted(r["cpu_seconds"] for r in rs)
    count = lambda f: sum(1 for r in rs if f(r))  # noqa: E731
    rows = [[f"0–{n - 1}", n, f"{count(lambda r: r['top1_encrypted'] == r['top1_simulated'])}/{n}",
             f"{count(lambda r: r['top1_encrypted'] == r['top1_plaintext'])}/{n}",
             f"{count(lambda r: r['top1_encrypted'] == r['label'])}/{n}",
             f"{count(lambda r: r['top1_plaintext'] == r['label'])}/{n}",
             f"{sec(cpu[0])} / {sec(cpu[n // 2])} / {sec(cpu[-1])}",
             f"{max(r['max_abs_error_vs_simulated'] for r in rs):.1e}"]]
    enc = table(["images", "n", "top-1 encrypted = simulated", "encrypted = plaintext", "encrypted correct",
                 "plaintext correct", "CPU seconds min / median / max", "max abs(encrypted − simulated)"], rows)
    differ = [r for r in rs if len({r["top1_encrypted"], r["top1_simulated"], r["top1_plaintext"]}) > 1]
    enc += ("\n\nImages where encrypted, simulated and plaintext top-1 differ: " + (", ".join(
        f"{r['image']} (encrypted {r['top1_encrypted']}, simulated {r['top1_simulated']}, plaintext "
        f"{r['top1_plaintext']})" for r in differ) if differ else "none") + ".")
    if differ and all(r["top1_encrypted"] == r["top1_simulated"] for r in differ):
        enc += (" On each, the encrypted run equals the plan's simulation: the polynomial activations change the "
                "trained network's top-1 there (the polynomial network agrees with the trained one on "
                f"{p['exact_test']['top1_polynomial_equals_trained']:.1%} of the exact test set, next section).")
    if e.get("runs", 1) > 1:
        enc += (f" Measured in {e['runs']} runs of the same plan (`--resume`: the later runs continue the rows, each "
                "with its own keys); the machine's load is in the header.")
    enc += \
        f"\n\n{e['preset']}, layout ({'P' if e['layout'] == 'packed' else e['layout']}), {e['threads']} thread(s), " \
        f"{e['bootstrap_points']} planned bootstraps (estimate {sec(e['estimated_seconds'])} per image); mean " \
        f"{sec(e['seconds_per_image_mean'])} wall, {sec(e['cpu_seconds_per_image_mean'])} CPU per image; evaluation keys {e['eval_key_bytes'] / 2 ** 30:.2f} GiB; " \
        f"compile {sec(e['compile_seconds'])} ({e['calibration_images']} calibration images), keygen " \
        f"{sec(e['keygen_seconds'])}; peak RSS {e['peak_rss_gib']:.1f} GiB. Peer figures: OpenFHE ResNet-20 " \
        f"{e['peers']['openfhe_resnet20']}" + \
        (f"; Orion ResNet-20 {e['peers']['orion_resnet20']}" if "orion_resnet20" in e["peers"] else "") + "."
    sets = {"jpeg_test": "CIFAR-10 test, 10 000 JPEG q75 (lossy)", "exact_test": "CIFAR-10 test, first 1 017 (exact)"}
    prow = [[sets[k], p[k]["images"], f"{p[k]['accuracy_trained']:.2%}", f"{p[k]['accuracy_polynomial']:.2%}",
             f"{p[k]['top1_polynomial_equals_trained']:.2%}",
             sum(a["outside_fitted_range"] for a in p[k]["activations_outside"].values()),
             sum(a["outside_domain"] for a in p[k]["activations_outside"].values())] for k in sets]
    degrees = ", ".join(str(a["degree"]) for a in p["activations"])
    sc = p["simulate_check"]
    poly = table(["test set", "images", "trained (GELU)", "polynomial network (runs encrypted)", "top-1 agreement",
                  "activation inputs outside the fitted range", "outside the guarded domain"], prow) + \
        f"\n\nGELU fitted by the compiler (minimax degrees {degrees}) on {p['calibration_images']} calibration " \
        f"images; float64, no encryption. `cm.simulate` (the encrypted plan in plaintext: quantised weights, " \
        f"bootstraps modelled) equals the polynomial network's top-1 on {sc['top1_equal']:.0%} of {sc['images']} " \
        f"images (max abs logit difference {sc['max_abs_logit_difference']:.1e})."
    return section("CIFAR-10 ResNet, encrypted one image at a time", enc_name, enc_command, enc, e) + "\n" + \
        section("CIFAR-10 ResNet: the polynomial network on the whole test sets", poly_name, poly_command, poly, p)


def gpu(name: str, command: str) -> str:
    d = load(name)
    ops, peer = d["hemlp"]["ops"], (d.get("desilo") or {}).get("ops", {})
    dev, m = d["device"], d.get("machine", {})
    labels = {"ntt_top_ext": "NTT, 34 limbs (Q and P)", "add_top": "add", "rescale_top": "rescale",
              "mul_relin_rescale_top": "ct × ct + relinearise + rescale", "rotate_top": "rotate by 1",
              "rotate_hoisted8_top": "8 hoisted rotations", "lintrans_bsgs32_top": "BSGS level, 32 diagonals",
              "pcmm_rlwe_256x256_L1": "PCMM 256×256 × 256 ciphertexts (level 1)",
              "pcmm_mlwe_256x256_k16_L1": "PCMM 256×256, MLWE k = 16: 16 ciphertexts of 4096 columns (level 1)",
              "pcmm_msrlwe_256x256_k8_L1": "PCMM 256×256, MSRLWE: 256 rows of 8 chunks sharing a (level 1)",
              "polyeval_cheb31_top": "Chebyshev polynomial, degree 31", "mod_raise_to_top": "ModRaise to the top",
              "bootstrap": "bootstrap (full slots)"}
    rows = []
    for k, rec in ops.items():
        if "median_s" not in rec:
            continue
        p = peer.get(k) or {}
        pm = p.get("median_s")
        mine, theirs = ms(rec["median_s"]), ms(pm) if pm else "–"
        if k == "bootstrap":    # what each refresh leaves: levels and precision differ between the two
            mine += f" ({rec['levels_left']} levels left, {rec['precision_bits']:.1f} bits)"
            theirs += f" ({p['levels_left']} levels left, {p['precision_bits']:.1f} bits)" if pm else ""
        rows.append([labels.get(k, k), mine, theirs, f"{rec['median_s'] / pm:.2f}×" if pm else "–"])
    for k, what in (("mul_relin_rescale_top_minus1", "ct × ct + relinearise + rescale, top − 1"),
                    ("rotate_top_minus1", "rotate by 1, top − 1"), ("matvec_256", "256×256 matrix × 1 encrypted vector"),
                    ("bootstrap", "bootstrap (full slots)")):
        p = peer.get(k) or {}
        if p.get("median_s") and "median_s" not in ops.get(k, {}):
            extra = f" ({p['levels_left']} levels left, {p['precision_bits']:.1f} bits)" if k == "bootstrap" else ""
            rows.append([what, "not measured in this run" if k == "bootstrap" else "–", ms(p["median_s"]) + extra,
                         "–"])
    body = table(["op (N16-boot, top level)", "hemlp GPU (ms)", "DESILO GPU (ms)", "hemlp / DESILO"], rows)
    g = d.get("gemm") or {}
    if g:
        base = g.get("torch_fp64_gemm", {})
        grows = [[k, ms(g[k]["median_s"]), ms(base["median_s"]) if base.get("median_s") else "–",
                  f"{g[k]['ratio_to_fp64_gemm']:.2f}×" if "ratio_to_fp64_gemm" in g[k] else "–",
                  "yes" if g[k].get("spot_check_exact") else "no"]
                 for k in g if isinstance(g[k], dict) and "spot_check_exact" in g[k]]     # one row per modulus, engine
        body += "\n\nExact modular GEMM " + "×".join(str(v) for v in g["shape"]) + " (d1 × d2 × columns, |U| ≤ 2^8) " \
            f"against the card's own fp64 GEMM of the same shape through PyTorch ({base.get('tflops', 0):.1f} TFLOP/s):\n\n" + \
            table(["prime", "modgemm (ms)", "fp64 GEMM (ms)", "ratio", "64 entries exact"], grows)
    boot = ops.get("bootstrap", {})
    if "median_s" in boot:
        st = boot.get("stages_s", {})
        body += ("\n\nhemlp's bootstrap (median of " f"{boot['repeats']}) by stage, synchronised at each boundary: "
                 + ", ".join(f"{k.replace('_', ' ')} {ms(v)} ms" for k, v in st.items())
                 + f". Its output is {'bit-identical' if boot.get('bit_identical_to_cpu') else 'NOT bit-identical'} to "
                 f"the CPU Bootstrapper's on the same ciphertext and keys (the CPU took {boot['cpu_bootstrap_s']:.2f} s "
                 f"on the GPU machine's host); setting up keys, plans and the device (CPU) {boot['setup_s']:.1f} s, the "
                 f"first call (encoding and uploading the transforms' diagonals) {boot['first_call_s']:.2f} s.")
    git = m.get("git", {})
    dl = d.get("desilo") or {}
    body += (f"\n\nMeasured on one {dev.get('name')} ({dev.get('memory_bytes', 0) / 2**30:.0f} GiB; driver "
             f"{m.get('gpu_driver') or 'not recorded'}, {m.get('nvcc') or 'nvcc ?'}), host {m.get('cpu', {}).get('model', '?')}; "
             f"median of {d['repeats']} calls each synchronised (fewer for the PCMM and BSGS rows: see the JSON), "
             f"git {str(git.get('commit'))[:7]}{' with uncommitted changes' if git.get('dirty') else ''} (docs/gpu.md says "
             "which code ran). hemlp runs N16-boot (128-bit, top level 27, 28 + 6 primes, "
             f"5 digits); DESILO {dl.get('version', '?')} ({dl.get('distribution', '?')}) its bootstrappable N = 2^16 "
             "set (top level 26, 28 limbs), whose rotation at the top level also drops a level. The hemlp rows run "
             "on uniform residues (the same work as real ciphertexts); every hemlp GPU op equals the CPU core bit for "
             "bit (tests/gpu). DESILO's matrix row is one vector through its rotation-based product; hemlp's PCMM "
             "row multiplies 256 ciphertexts of 2^15 slots each at once (other work; per encrypted vector "
             f"{ops.get('pcmm_rlwe_256x256_L1', {}).get('per_encrypted_vector_s', 0) * 1e6:.2f} µs).")
    return f"## GPU backend vs DESILO FHE on one H200\n\nSource: `bench/{name}`.  \nCommand: `{command}`\n\n{body}\n"


def render() -> str:
    env = "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python"
    parts = [
        "# Benchmarks\n\nGenerated by `python scripts/bench_tables.py` from the JSON files in `bench/` (do not edit by hand; "
        "`tests/apps/test_docs.py` checks it is current). One table per benchmark, the current run only; each "
        "section names its JSON file, the machine and the load it ran under. Timings on a shared 2-core machine "
        "are noisy: compare ratios within one table, not absolute times across tables.\n",
        peers_core("peers_core.json", "CKKS core vs OpenFHE and TenSEAL",
                   "scripts/bench_peers.py core --logn 14,15 --threads 1,2 --repeats 5 --rounds 2 --json bench/peers_core.json"),
        peers_core("peers_core_scalar.json", "CKKS core vs peers, scalar kernels",
                   "HEMLP_DISABLE_AVX512=1 scripts/bench_peers.py core --logn 14,15 --threads 1,2 --repeats 5 --rounds 2 "
                   "--json bench/peers_core_scalar.json"),
        peers_core("peers_core_avx2.json", "CKKS core vs peers, hemlp's AVX2 kernels",
                   "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE HEMLP_SIMD=avx2 .venv/bin/python scripts/bench_peers.py "
                   "core --logn 14,15 --threads 1,2 --repeats 5 --rounds 2 --json bench/peers_core_avx2.json"),
        core("core_N14.json", f"{env} -m hemlp.bench core --preset N14-d6 --json bench/core_N14.json"),
        peers_pcmm("peers_pcmm.json", "scripts/bench_peers.py pcmm --sizes 64,256 --json bench/peers_pcmm.json"),
        pcmm("pcmm_N14.json", "PCMM formats vs fp64 GEMM",
             f"{env} -m hemlp.bench pcmm --preset N14-d6 --sizes 256 --json bench/pcmm_N14.json"),
        pcmm("pcmm_small_primes_N14.json", "PCMM on small primes (N14-pcmm) beside N14-d6",
             f"{env} -m hemlp.bench pcmm --preset N14-d6,N14-pcmm --sizes 256 --d3 N/2 --fresh 256 --repeats 5 "
             "--json bench/pcmm_small_primes_N14.json"),
        pcmm("pcmm_4096_N14.json", "PCMM formats vs fp64 GEMM, 4096 rows",
             f"{env} -m hemlp.bench pcmm --preset N14-d6 --sizes 4096 --d3 N/2,N --threads 1 --json bench/pcmm_4096_N14.json"),
        pcmm("pcmm_4096_L0_N14.json", "PCMM formats vs fp64 GEMM, 4096 rows at level 0 (a final layer, unrescaled)",
             f"{env} -m hemlp.bench pcmm --preset N14-d6 --sizes 4096 --d3 4N --level 0 --no-rescale --threads 1 "
             "--repeats 1 --fresh '' --json bench/pcmm_4096_L0_N14.json (peak RSS 22.1 GiB: run it alone)"),
        pcmm("pcmm_hs_N14.json", "PCMM vs the rotation baseline (Halevi–Shoup, BSGS + hoisting)",
             f"{env} -m hemlp.bench pcmm --preset N14-d6 --sizes 256 --threads 1 --baseline --json bench/pcmm_hs_N14.json"),
        modgemm("modgemm.json", "scripts/bench_modgemm.py --json bench/modgemm.json"),
        infer("infer_N14.json", f"{env} -m hemlp.bench infer --preset N14-d6 --batch 4096 --json bench/infer_N14.json"),
        infer("infer_N14_avx2.json", "env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE=Haswell HEMLP_SIMD=avx2 .venv/bin/python "
                                     "-m hemlp.bench infer --preset N14-d6 --batch 4096 --json bench/infer_N14_avx2.json",
              "Encrypted inference on the AVX2 path (AVX-512 CPU forced to AVX2 kernels: a proxy for AVX2-only CPUs)"),
        layouts("infer_layouts.json", f"{env} -m hemlp.bench infer --layout-batches 1024,4096 --preset N14-d6 "
                                      "--max-key-gb 4 --max-estimate-s 150 --run-repeats 2 --threads 2 "
                                      "--json bench/infer_layouts.json"),
        estimates("estimates.json", f"{env} -m hemlp.bench estimates --check --json bench/estimates.json"),
        weights("weights_N15.json", f"{env} -m hemlp.bench weights --hidden 32 --batch 16 --downsample 2 "
                                    "--json bench/weights_N15.json"),
        ray(f"{env} -m hemlp.bench ray --model mlp --batch 8192 --repeats 11 --back-to-back 3 --json bench/ray_mlp_N14.json "
            "(--batch, --dims, --nodes 2 for the other rows)"),
        ray_boot("ray_boot.json", f"{env} -m hemlp.bench ray_boot --rounds 3 --json bench/ray_boot.json"),
        ray_boot("ray_boot_batched.json", f"{env} -m hemlp.bench ray_boot --pipeline batched --rounds 3 "
                                          "--json bench/ray_boot_batched.json"),
        ray_boot_packed("ray_boot_packed.json", f"{env} -m hemlp.bench ray_boot --layout packed --rounds 3 "
                                                "--threads-per-task 1,2 --json bench/ray_boot_packed.json"),
        files("files_N14.json", f"{env} -m hemlp.bench files --preset N14-d6 --json bench/files_N14.json"),
        simd_paths("core_N14_simd_paths_avx2.json", f"{env} -m hemlp.bench core --preset N14-d6 --threads 1 "
                                                    "--simd all --json bench/core_N14_simd_paths_avx2.json"),
        boot("boot_N16.json", f"{env} -m hemlp.bench boot --preset N16-boot --threads 1,2 --repeats 1 --pair --json "
                              "bench/boot_N16.json (run by the next section's command, --hemlp-json)"),
        peers_boot("peers_boot_N16.json", "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "
                                          "scripts/bench_peers.py boot --json bench/peers_boot_N16.json "
                                          "--hemlp-json bench/boot_N16.json"),
        peers_boot("peers_boot_N16_avx2.json", "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE scripts/bench_peers.py "
                                               "boot --threads 1 --repeats 3 --json bench/peers_boot_N16_avx2.json "
                                               "--hemlp-json bench/peers_boot_N16_avx2_hemlp.json",
                   "Bootstrapping vs OpenFHE, AVX2 CPU, 3 runs per side"),
        lintrans("lintrans_cts_N15.json", "Bootstrapping linear transforms: CoeffToSlot",
                 f"{env} -m hemlp.bench lintrans --log-n 15 --direction cts --json bench/lintrans_cts_N15.json"),
        lintrans("lintrans_stc_N15.json", "Bootstrapping linear transforms: SlotToCoeff",
                 f"{env} -m hemlp.bench lintrans --log-n 15 --direction stc --depth 3 --json bench/lintrans_stc_N15.json"),
        mambo_end_to_end("end_to_end_mambo_N16.json", f"{env} -m hemlp.bench mambo --preset N16-boot --ks 2 "
                                                      "--ds 256,1024 --repeats 3 --inner 1 --threads 1 "
                                                      "--json bench/end_to_end_mambo_N16.json"),
        decrypt_noise("decrypt_noise_N14.json", f"{env} -m hemlp.bench decrypt_noise --preset N14-d6 --repeats 5 "
                                                "--json bench/decrypt_noise_N14.json"),
        gpu("gpu_h200.json", "scripts/gpu_check.sh (on the GPU machine; it runs python -m hemlp.bench gpu --json "
                             "bench/gpu_h200.json with DESILO's wheel carried in .whl/)"),
        cifar_resnet("cifar_resnet_encrypted.json", "cifar_resnet_poly_accuracy.json",
                     ".venv/bin/python scripts/cifar_resnet_encrypted.py --data-root "
                     "../shared/data --images 100 --calibration 128 --diagonal-cache-gib 1 "
                     "--json bench/cifar_resnet_encrypted.json --resume",
                     ".venv/bin/python scripts/cifar_resnet_encrypted.py --data-root ../shared/data --images 0 "
                     "--calibration 128 --poly-json bench/cifar_resnet_poly_accuracy.json"),
    ]
    return "\n".join(p for p in parts if p)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare with docs/benchmarks.md")
    text = render()
    readme = ROOT / "README.md"
    readme_text = render_readme(readme.read_text())
    if ap.parse_args().check:
        same = OUT.exists() and OUT.read_text() == text and readme.read_text() == readme_text
        print("docs/benchmarks.md and the README's figures are current" if same else "docs/benchmarks.md or the "
              "README's bootstrapping line differs from bench/*.json: rerun python scripts/bench_tables.py")
        return 0 if same else 1
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(text)
    readme.write_text(readme_text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
