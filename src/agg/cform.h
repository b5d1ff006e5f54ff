/* cform.h: the compact forms in which a tier window stores its statistics and its
 * sketch (docs/formats/tier.md, "The compact window list"): C1 in tier files of
 * version 3, C2 in version 5. One number for both parts of a window. */
#ifndef BDB_AGG_CFORM_H
#define BDB_AGG_CFORM_H

enum { BDB_C1 = 1, BDB_C2 = 2 };

#endif
