#!/bin/bash
#SBATCH -t abc
echo done
