"""Planning machinery (pure): snapshot, scheduler model, landing, predictor, protections, limits, the plan."""
