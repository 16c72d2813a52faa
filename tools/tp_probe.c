#include <stdio.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
#define BODY(OP) OP " %%zmm12,%%zmm13,%%zmm0\n" OP " %%zmm12,%%zmm13,%%zmm1\n" OP " %%zmm12,%%zmm13,%%zmm2\n" OP " %%zmm12,%%zmm13,%%zmm3\n" \
 OP " %%zmm12,%%zmm13,%%zmm4\n" OP " %%zmm12,%%zmm13,%%zmm5\n" OP " %%zmm12,%%zmm13,%%zmm6\n" OP " %%zmm12,%%zmm13,%%zmm7\n" \
 OP " %%zmm12,%%zmm13,%%zmm8\n" OP " %%zmm12,%%zmm13,%%zmm9\n" OP " %%zmm12,%%zmm13,%%zmm10\n" OP " %%zmm12,%%zmm13,%%zmm11\n"
#define BODYY(OP) OP " %%ymm12,%%ymm13,%%ymm0\n" OP " %%ymm12,%%ymm13,%%ymm1\n" OP " %%ymm12,%%ymm13,%%ymm2\n" OP " %%ymm12,%%ymm13,%%ymm3\n" \
 OP " %%ymm12,%%ymm13,%%ymm4\n" OP " %%ymm12,%%ymm13,%%ymm5\n" OP " %%ymm12,%%ymm13,%%ymm6\n" OP " %%ymm12,%%ymm13,%%ymm7\n" \
 OP " %%ymm12,%%ymm13,%%ymm8\n" OP " %%ymm12,%%ymm13,%%ymm9\n" OP " %%ymm12,%%ymm13,%%ymm10\n" OP " %%ymm12,%%ymm13,%%ymm11\n"
#define RUN(name, body) { long n=50000000; double t=now(); \
  __asm__ volatile("vpxord %%zmm12,%%zmm12,%%zmm12\nvpxord %%zmm13,%%zmm13,%%zmm13\n1:\n" body "dec %0\njnz 1b\n" : "+r"(n) :: "xmm0","xmm1","xmm2","xmm3","xmm4","xmm5","xmm6","xmm7","xmm8","xmm9","xmm10","xmm11","xmm12","xmm13","cc"); \
  double d=now()-t; printf("%-14s %.2f G instr/s\n", name, 50000000.0*12/d/1e9); }
int main(){
  RUN("vfmadd zmm", BODY("vfmadd231ps"));
  RUN("vfmadd ymm", BODYY("vfmadd231ps"));
  RUN("vdpbf16ps zmm", BODY("vdpbf16ps"));
  RUN("vpdpbusd zmm", BODY("vpdpbusd"));
  RUN("vpdpbusd ymm", BODYY("vpdpbusd"));
  RUN("vpermps zmm", BODY("vpermps"));
  RUN("vcvtdq2ps", "vcvtdq2ps %%zmm12,%%zmm0\nvcvtdq2ps %%zmm12,%%zmm1\nvcvtdq2ps %%zmm12,%%zmm2\nvcvtdq2ps %%zmm12,%%zmm3\nvcvtdq2ps %%zmm12,%%zmm4\nvcvtdq2ps %%zmm12,%%zmm5\nvcvtdq2ps %%zmm12,%%zmm6\nvcvtdq2ps %%zmm12,%%zmm7\nvcvtdq2ps %%zmm12,%%zmm8\nvcvtdq2ps %%zmm12,%%zmm9\nvcvtdq2ps %%zmm12,%%zmm10\nvcvtdq2ps %%zmm12,%%zmm11\n");
  return 0;
}
