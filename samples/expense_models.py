"""The demo's application classes, in a module every entry point imports by the same name.

A checkpoint stores a class by its ``module:qualname``. A class defined in the script you run is
``__main__:ExpenseClaim`` there, and ``__main__`` is a different module in a worker started
another way (another script, ``python -m``, a test), so that worker could not load it. Defined
here, the class is ``expense_models:ExpenseClaim`` whatever the entry point, as long as this
folder is importable (running a script from it puts it on ``sys.path``).
"""

from dataclasses import dataclass


@dataclass
class ExpenseClaim:
    expense_id: str
    employee: str
    amount: float
    purpose: str
