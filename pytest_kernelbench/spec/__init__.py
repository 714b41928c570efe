"""The problem spec stage: what a problem folder says (problem.py), what its solution() receives
(shapes.py) and what machine runs it (hardware.py)."""
