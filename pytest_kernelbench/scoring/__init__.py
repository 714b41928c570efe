"""Scoring for training: `evaluate()` (one candidate, one problem, in this process),
`evaluate_many()` (a batch on a bounded pool of worker processes, results as they finish), and the
HTTP service over them (service.py, `kernelbench serve`). Every evaluation goes through the same
KBSession.run_item a pytest item runs: no second harness."""
from .evaluate import Evaluation, EvaluateError, Evaluator, UnknownProblem, evaluate
from .pool import WorkerPool, evaluate_many

__all__ = ["Evaluation", "EvaluateError", "Evaluator", "UnknownProblem", "WorkerPool", "evaluate", "evaluate_many"]
