"""What a run uses and what it may use: memory and GPU sampling per stage, costs priced from the
config's rates, and the budget caps that stop a run.
"""
