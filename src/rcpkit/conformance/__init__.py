"""The RCP/1 conformance harness: certify any server at L0/L1/L2 over stdio or HTTP (§14.5).

>>> report = run_checks(Target(argv=("python", "server.py")))
>>> report.certified_level, report.ok
"""

from rcpkit.conformance.model import CHECKS, Check, Level
from rcpkit.conformance.report import CheckResult, Outcome, Report
from rcpkit.conformance.runner import Target, run_checks

__all__ = ["CHECKS", "Check", "CheckResult", "Level", "Outcome", "Report", "Target", "run_checks"]
