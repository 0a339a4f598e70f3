"""Wrong: returns one value where the definition has two outputs."""


def run(x):
    return x * 2.0
