"""Wrong: correct except for one NaN."""


def run(A, B, bias):
    C = A @ B.T + bias
    C[0, 0] = float("nan")
    return C
