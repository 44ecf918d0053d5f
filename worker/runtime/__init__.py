"""The Spark runtime: the driver's epoch loop, the executor (a job per epoch, or shared hosts), what a
Spark task runs, the control channel between them, and the Python worker daemon."""
