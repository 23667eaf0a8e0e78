#!/bin/bash
#SBATCH -N abc
echo done
