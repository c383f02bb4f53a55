"""What a source's classes allow under the open protocol, where each class split draws its own train, val and test
classes: how many splits make disjoint test classes. Free of torch, so validate and the report both read it."""


def disjoint_test_splits(protocol: str, class_counts: dict[str, int]) -> int | None:
    """How many class splits make disjoint test classes, from one split's class count per part (train, val, test):
    all the classes // the test part's. More splits of the same classes test on classes already tested: they narrow
    the interval around these classes, not around the source's. None under the closed protocol, where every split
    holds every class."""
    if protocol != "open" or not class_counts.get("test"):
        return None
    return sum(class_counts.values()) // class_counts["test"]
