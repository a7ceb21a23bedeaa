"""Which preference losses length-average their sequence log-probs (SPEC "Losses"): IPO, ORPO and
SimPO average over scored tokens; DPO and KTO sum."""

from __future__ import annotations

import torch

from assay.train.preference import KINDS, PreferenceSettings, sequence_logps


def test_ipo_orpo_simpo_average_and_dpo_kto_sum():
    averaged = {kind for kind in KINDS if PreferenceSettings(kind).average}
    assert averaged == {"ipo", "orpo", "simpo"}
    per_token = torch.tensor([[-1.0, -2.0, 0.0], [-3.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    ipo = PreferenceSettings("ipo")
    assert sequence_logps(per_token, mask, ipo.average).tolist() == [-1.5, -3.0]
