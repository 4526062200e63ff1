"""OrandCar builder: build, check and publish a rejection-sampled VLM dataset."""

__version__ = "0.1.0"
