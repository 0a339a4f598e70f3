"""Wrong: destination passing, writes y but never idx (the integer sentinel shows it)."""

DESTINATION_PASSING = True


def run(x, y, idx):
    y.copy_(x * 2.0)
