export type Color = "red" | "green" | "blue";
export type Code = 200 | 404 | -1;
export type Mixed = "auto" | 0 | true | null;

export interface Circle {
  kind: "circle";
  radius: number;
}
export interface Square {
  kind: "square";
  side: number;
}
export type Shape = Circle | Square | { kind: "point" };

export interface Unions {
  color: Color;
  code: Code;
  mixed: Mixed;
  shape: Shape;
  shapes: (Circle | Square)[];
  label: string | string[];
  /** A union written with a leading bar. */
  level: | "debug" | "info";
  loose: Color | string;
}
