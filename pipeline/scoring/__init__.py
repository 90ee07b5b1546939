"""Scoring rows with an exported model folder, on either device, and the columns a model's scores
become in a prediction table.
"""
