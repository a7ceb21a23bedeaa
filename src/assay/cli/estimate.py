"""``assay estimate CONFIG --budget B [--json]``: predicted peak, breakdown, and a fit verdict
(exit 1 when refused). The plan and the verdict are :mod:`assay.memory.plan`'s.
"""

from __future__ import annotations

import argparse
import json

from assay.memory.plan import gib, header_config, plan_from_config, refusal_line, verdict

EXIT_FITS, EXIT_REFUSED = 0, 1


def run(args: argparse.Namespace) -> int:
    from assay.errors import ConfigError
    from assay.settings.loader import load_train_config, model_path, parse_size
    from assay.train.preflight import check_against_model

    config = load_train_config(args.config)
    check_against_model(config)
    raw = args.budget if args.budget is not None else config.budget
    if raw is None:
        raise ConfigError(f"{args.config}: no budget: pass --budget (e.g. 4GiB) or set budget")
    try:
        budget = parse_size(raw)
    except ValueError as exc:
        raise ConfigError(f"{args.config}: --budget: {exc}") from None
    result = verdict(plan_from_config(config, header_config(model_path(config))), budget)
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print(
            f"predicted peak {gib(result['prediction']['total_bytes'])} "
            f"(budget {gib(budget)}, peak at the {result['prediction']['peak_phase']})"
        )
        for name, value in result["prediction"]["terms"].items():
            print(f"  {name:<16}{value:>16,}")
        print("fits" if result["fits"] else "refused: " + refusal_line(result))
    return EXIT_FITS if result["fits"] else EXIT_REFUSED


def arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``assay estimate``."""
    parser.add_argument("config", help="train config YAML")
    parser.add_argument("--budget", help="device memory budget such as 4GiB (default: config)")
    parser.add_argument("--json", action="store_true", help="print the estimate as JSON")
