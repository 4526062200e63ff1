"""OrandCar builder."""
