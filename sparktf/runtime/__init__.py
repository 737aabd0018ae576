"""What runs on the executors: cluster formation, data feed, training and inference workers.

Nothing here needs a SparkSession; TensorFlow is imported only inside the task processes.
"""
