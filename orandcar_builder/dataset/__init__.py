"""The dataset format: features, JSON Schemas, the Hub-layout writer and the validator."""
