"""CKKS bootstrapping on hemlp.ckks (layered as Lattigo's ckks -> bootstrapping).

- special_fft: the canonical embedding U as log2(n) butterfly stages, merged into levels (cleartext);
- reinterpret: exact level-free helpers (re-reading coefficients as slots, multiplying by X^k);
- subring: the trace that clears the coefficients sparse packing does not read (before sparse CtS);
- dft: homomorphic CoeffToSlot / SlotToCoeff with BSGS + hoisting, and the real/imaginary split;
- evalmod: EvalMod (Han–Ki cosine + double angles, native polynomial evaluation);
- params: BootParams (order, message ratio, EvalMod shape, DFT depths, sparse-secret weight);
- modraise: ScaleDown, sparse-secret encapsulation and ModRaise (native, csrc/boot/modraise);
- keys: client-side generation of exactly the keys one bootstrapper needs, at their levels;
- bootstrapper: Bootstrapper.bootstrap / bootstrap_pair;
- batch: batched bootstrapping on shared-a MSRLWE ciphertexts (BatchBootstrapper.bootstrap_batch, CtS-first);
- mambo: the S2C-first order, batched, and MaMBo (MamboBootstrapper.pcmm_bootstrap: PCMM fused at the bottom).
"""
from hemlp.bootstrap import dft, evalmod, reinterpret, special_fft, subring
from hemlp.bootstrap.bootstrapper import Bootstrapper, max_coefficient, slot_coefficients
from hemlp.bootstrap.dft import (DFTPlan, coeff_to_slot, dft_rotation_steps, join_real_imag, plan_coeff_to_slot,
                                 plan_slot_to_coeff, slot_to_coeff, split_real_imag)
from hemlp.bootstrap.evalmod import EvalModParams, eval_mod
from hemlp.bootstrap.keys import BootstrapKeys
from hemlp.bootstrap.modraise import EncapsulationKeys, dense_to_sparse, mod_raise, scale_down
from hemlp.bootstrap.params import BootParams
from hemlp.bootstrap.subring import subring_trace, subring_trace_steps
from hemlp.bootstrap.batch import BatchBootstrapKeys, BatchBootstrapper
from hemlp.bootstrap.mambo import MamboBootstrapper

__all__ = ["dft", "evalmod", "EvalModParams", "eval_mod", "reinterpret", "special_fft", "subring", "DFTPlan", "plan_coeff_to_slot", "plan_slot_to_coeff",
           "dft_rotation_steps", "coeff_to_slot", "slot_to_coeff", "split_real_imag", "join_real_imag",
           "subring_trace", "subring_trace_steps", "BootParams", "BootstrapKeys", "Bootstrapper",
           "EncapsulationKeys", "dense_to_sparse", "mod_raise", "scale_down", "slot_coefficients", "max_coefficient",
           "BatchBootstrapKeys", "BatchBootstrapper", "MamboBootstrapper"]
