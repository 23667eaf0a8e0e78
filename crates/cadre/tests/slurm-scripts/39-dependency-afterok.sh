#!/bin/bash
#SBATCH -d afterok:@PARENT@
echo done
