"""What a compiled model costs before any key exists: evaluation-key bytes per kind, the client's upload per input
batch, the server's peak memory and the seconds of keygen / encrypt / run (``hemlp.compile`` stores them in
``compiled.plan.info["resources"]`` and prints them with the plan; ``python -m hemlp.bench estimates`` checks
them against measurements).

The counts come from the layout (hemlp.layouts.base.Layout: key_inventory, ciphertexts_in / _out,
prepared_bytes, working_bytes); the sizes are those of the formats:

* a key-switching key for level l: Params.switch_key_bytes(l) serialised (its a-halves travel as seeds) and
  KEY_MEMORY_FACTOR times that in the server's memory (the a-halves expanded, the native key-switching forms, and
  the file's bytes while it is read: measured 4.6x resident, 5.6x at the peak of loading);
* a fresh ciphertext encrypted by the client under its secret key: N (l + 1) words (the a-half is a seed), twice
  that in memory and for every ciphertext a run produces.

Times use the planner's unit costs (hemlp.planner.layouts.unit_costs, from the active cost profile, which the
plan names: hemlp.planner.cost_model): the layout's seconds_estimate() (client
encryption included) split into encrypt and run, the layout's prepare_seconds_estimate() (the server encodes the
weights once, before its first batch), and keygen as a fixed part plus seconds per byte of key material.
Measured against these estimates: python -m hemlp.bench estimates, bench/estimates.json.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from hemlp.planner.cost_model import active_profile
from hemlp.planner.layouts import unit_costs

__all__ = ["Resources", "estimate_resources", "human_bytes", "KEYGEN_S_PER_BYTE", "SERVER_BASE_BYTES"]

#: seconds of key generation per serialised key byte (PRNG, Gaussian error, NTTs and the P·s products of each
#: digit), one thread; measured with `python -m hemlp.bench estimates` (N = 2^12 and 2^15 test sets, warm, on a
#: shared machine)
KEYGEN_S_PER_BYTE = 2.2e-9
#: seconds of the key pair itself and the per-call work of keygen() (sampling, the public key, Python); a process's
#: first keygen also starts the native thread pool and tables (a few ms more)
KEYGEN_BASE_S = 3e-4
#: the server process before any hemlp object: the interpreter, numpy and the native core (measured ~40 MB)
SERVER_BASE_BYTES = 40 * 2 ** 20
#: server memory per serialised evaluation-key byte (see the module docstring; measured at N = 2^12)
KEY_MEMORY_FACTOR = 5.0
#: working memory of the native products on top of the values the layouts hold (GEMM buffers, key-switch
#: temporaries, the file bytes of the input while it is read): a factor on the input batch in memory
TRANSIENT_FACTOR = 1.0


@dataclass
class Resources:
    """Estimates for one batch of batch_size samples (bytes and seconds)."""
    key_bytes: dict = field(default_factory=dict)   # kind -> serialised bytes ("relin", "rotation", ...)
    key_counts: dict = field(default_factory=dict)  # kind -> number of key-switching keys
    upload_bytes: int = 0                            # the client's encrypted input batch
    download_bytes: int = 0                          # the server's encrypted result
    server_memory_bytes: int = 0                     # peak resident memory of a server process running one batch
    keygen_seconds: float = 0.0
    encrypt_seconds: float = 0.0
    run_seconds: float | None = None                 # None: the layout has no time estimate
    prepare_seconds: float = 0.0                     # the server's one-time encoding of the weights (prepare())
    cost_profile: str = ""                           # where the unit costs came from (CostProfile.source)

    @property
    def eval_key_bytes(self) -> int:
        return sum(self.key_bytes.values())

    def to_json(self) -> dict:
        return dict(asdict(self), eval_key_bytes=self.eval_key_bytes)

    @classmethod
    def from_json(cls, d: dict) -> "Resources":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def lines(self, batch: int) -> list[str]:
        def count(k):
            n = self.key_counts.get(k, 1)
            return f"{n} key{'s' if n != 1 else ''}"

        keys = ", ".join(f"{k} {human_bytes(v)} ({count(k)})" for k, v in self.key_bytes.items())
        run = "n/a" if self.run_seconds is None else f"{self.run_seconds:.3g} s"
        return [f"estimates before any key exists (batch of {batch}):",
                f"  evaluation keys {human_bytes(self.eval_key_bytes)}" + (f": {keys}" if keys else " (none needed)")
                + f"; keygen ~{self.keygen_seconds:.3g} s",
                f"  client upload {human_bytes(self.upload_bytes)} per input batch "
                f"(encrypt ~{self.encrypt_seconds:.3g} s), "
                f"download {human_bytes(self.download_bytes)}",
                f"  server: peak memory ~{human_bytes(self.server_memory_bytes)}, "
                + (f"prepare ~{self.prepare_seconds:.3g} s once, " if self.prepare_seconds >= 0.05 else "")
                + f"run ~{run} per batch (one thread)"] + (
                    [f"  time estimates from the cost profile: {self.cost_profile}"] if self.cost_profile else [])


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} TB"


def _ct_bytes(N: int, level: int, seeded: bool = False) -> int:
    return (1 if seeded else 2) * N * (int(level) + 1) * 8


def estimate_resources(layout) -> Resources:
    """The resources of a planned layout (hemlp.layouts.base.Layout) for its batch size."""
    params = layout.params
    N, top = params.N, layout.top_level
    r = Resources()
    for kind, (count, level) in layout.key_inventory().items():
        if level is None or not count:
            continue
        r.key_bytes[kind] = int(count) * params.switch_key_bytes(int(level))
        r.key_counts[kind] = int(count)
    n_in = layout.ciphertexts_in()
    n_out, lv_out = layout.ciphertexts_out()
    r.upload_bytes = n_in * _ct_bytes(N, top, seeded=True)
    r.download_bytes = n_out * _ct_bytes(N, lv_out)
    input_mem = n_in * _ct_bytes(N, top)
    r.server_memory_bytes = int(SERVER_BASE_BYTES + KEY_MEMORY_FACTOR * r.eval_key_bytes
                                + input_mem * (1 + TRANSIENT_FACTOR)
                                + layout.prepared_bytes() + layout.working_bytes())
    c = unit_costs()
    r.cost_profile = active_profile().source
    r.keygen_seconds = KEYGEN_BASE_S + r.eval_key_bytes * KEYGEN_S_PER_BYTE
    r.encrypt_seconds = n_in * N * (top + 1) * c["encrypt"]
    r.prepare_seconds = float(layout.prepare_seconds_estimate())
    total = layout.seconds_estimate()
    if total is not None:
        r.run_seconds = max(0.0, float(total) - r.encrypt_seconds)
    return r
