"""CKKS bootstrapping components on hemlp.ckks (layered as Lattigo's ckks -> bootstrapping).

- special_fft: the canonical embedding U as log2(n) butterfly stages, merged into levels (cleartext);
- reinterpret: exact level-free helpers (re-reading coefficients as slots, multiplying by X^k);
- subring: the trace that clears the coefficients sparse packing does not read (before sparse CtS);
- dft: homomorphic CoeffToSlot / SlotToCoeff with BSGS + hoisting, and the real/imaginary split.
"""
from hemlp.bootstrap import dft, reinterpret, special_fft, subring
from hemlp.bootstrap.dft import (DFTPlan, coeff_to_slot, dft_rotation_steps, join_real_imag, plan_coeff_to_slot,
                                 plan_slot_to_coeff, slot_to_coeff, split_real_imag)
from hemlp.bootstrap.subring import subring_trace, subring_trace_steps

__all__ = ["dft", "reinterpret", "special_fft", "subring", "DFTPlan", "plan_coeff_to_slot", "plan_slot_to_coeff",
           "dft_rotation_steps", "coeff_to_slot", "slot_to_coeff", "split_real_imag", "join_real_imag",
           "subring_trace", "subring_trace_steps"]
