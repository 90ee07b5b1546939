"""Scoring rows with an exported model folder, on either device, and the columns a model's scores
become in a prediction table; a past run's model chosen and verified against its manifest
(``run_models``) and input rows read as the model was fitted (``input_rows``), shared by
``pipeline predict``, serving and the ``promote`` stage.
"""
