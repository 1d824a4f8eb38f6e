"""Training references for the ndpe models (run from a checkout): ``python -m train.main --config ...``."""
