"""Wrong: destination passing, writes nothing."""

DESTINATION_PASSING = True


def run(A, B, bias, C):
    return A @ B.T + bias  # returned, but a DPS callable must write C
