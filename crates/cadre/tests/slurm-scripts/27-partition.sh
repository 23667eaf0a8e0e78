#!/bin/bash
#SBATCH -p gpu
echo done
