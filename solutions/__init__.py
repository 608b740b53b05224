"""Solutions to the exercises of the notebooks, one module per notebook (`nbNN.py`).

Each module holds `SOLUTIONS = {"check_NN_k": answer}` and `WRONG = {"check_NN_k": [(wrong_answer, fragment)]}`:
typical mistakes, and a fragment of the hint the grader must give for each. tests/test_exercises.py runs every
grader on both. Try the exercises before you read these.
"""
