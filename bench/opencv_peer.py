"""OpenCV's SIFT ``compute`` called on a grid of keypoints in a plain loop: the peer that
``imgscale bench describe-speed`` measures dense SIFT against, in one process or in several at
once. It imports numpy and OpenCV only, so a spawned process is ready in a fraction of a second
(imgscale's pipeline would add seconds of imports to each)."""

from __future__ import annotations

import time

import numpy as np


def opencv_loop(images: np.ndarray, keypoints: np.ndarray, threads: int | None = None) -> int:
    """SIFT of ``keypoints`` (rows of x, y and OpenCV's keypoint size) in every image, OpenCV
    called once an image on ``threads`` threads (default: as OpenCV sets them): descriptors
    computed."""
    import cv2

    default = cv2.getNumThreads()
    cv2.setNumThreads(default if threads is None else threads)
    try:
        points = [cv2.KeyPoint(float(x), float(y), float(size), 0) for x, y, size in keypoints]
        sift = cv2.SIFT_create()
        return sum(len(sift.compute(image, points)[1]) for image in images)
    finally:
        cv2.setNumThreads(default)


def in_processes(images: np.ndarray, keypoints: np.ndarray, processes: int) -> tuple[int, float]:
    """(descriptors, seconds) of ``processes`` plain processes running `opencv_loop` on one
    OpenCV thread at once, each over its share of ``images``; their start is not timed."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    shares = np.array_split(images, processes)
    spawn = multiprocessing.get_context("spawn")  # no fork of the caller's threads
    with ProcessPoolExecutor(processes, mp_context=spawn) as pool:
        list(pool.map(_one_thread_loop, [share[:1] for share in shares], [keypoints] * processes))
        began = time.perf_counter()
        count = sum(pool.map(_one_thread_loop, shares, [keypoints] * processes))
        return count, time.perf_counter() - began


def _one_thread_loop(images: np.ndarray, keypoints: np.ndarray) -> int:
    return opencv_loop(images, keypoints, threads=1)
