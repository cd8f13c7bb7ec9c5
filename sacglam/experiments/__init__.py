"""The paper's experiments as Ray Tune grids: experiment files (`spec`), the Tune runner
(`tune_runner`), and the results table, plot and summary (`results`)."""
